#include "k3/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "k3/base/error.h"

namespace k3::optim {

double global_grad_norm(const float* g, size_t n) {
  constexpr size_t kBlock = 1 << 16;
  const int64_t blocks = static_cast<int64_t>((n + kBlock - 1) / kBlock);
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t begin = static_cast<size_t>(b) * kBlock, end = std::min(n, begin + kBlock);
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

bool StepGuard::admit(double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    bad_in_a_row_ = 0;
    return true;
  }
  ++skipped_;
  ++bad_in_a_row_;
  K3_CHECK(
      bad_in_a_row_ < max_in_a_row_, bad_in_a_row_,
      " steps in a row produced a non-finite loss or gradient: stopping rather than training on "
      "garbage (lower train.lr or check the data)");
  return false;
}

}  // namespace k3::optim
