#include "k3/model/quantile_balancing.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"

namespace k3::model {
namespace {

constexpr int64_t kParallelMin = 1 << 15;
// observe() walks the scores row by row; a thread owns a block of experts (a cache line of
// scores) and so its rows of the histogram: no two threads ever touch the same count.
constexpr int64_t kExpertBlock = 16;

}  // namespace

float select_top_k(const float* s, const float* b, int64_t experts, int64_t k, int32_t* ids) {
  auto key = [&](int64_t e) {
    const float v = s[e] + b[e];
    return std::isnan(v) ? -INFINITY : v;  // a NaN score is never preferred, and sorts consistently
  };
  // ids[0, filled) holds the best experts seen so far, in selection order.
  int64_t filled = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const float v = key(e);
    if (filled == k + 1 && !(v > key(ids[k]))) continue;  // an equal key keeps the lower index
    int64_t pos = std::min(filled, k);
    for (; pos > 0 && v > key(ids[pos - 1]); --pos) ids[pos] = ids[pos - 1];
    ids[pos] = static_cast<int32_t>(e);
    filled = std::min(filled + 1, k + 1);
  }
  return key(ids[k]);
}

QuantileBalancer::QuantileBalancer(int64_t experts, int64_t k)
    : RouterBalancer(experts, k, static_cast<size_t>(experts * (kBins + 1) + 1)) {}

int64_t QuantileBalancer::bin(double r, double lo, double hi) {
  const double x = std::floor((r - lo) * static_cast<double>(kBins) / (hi - lo));
  if (!(x >= 0)) return 0;  // also NaN
  return x >= kBins - 1 ? kBins - 1 : static_cast<int64_t>(x);
}

void QuantileBalancer::observe(const float* scores, const float* alpha, const int32_t* ids,
                               int64_t rows) {
  allocate();
  const int64_t E = experts_;
  const double lo = lo_, hi = hi_;
  int64_t* hist = counts_.data();
#pragma omp parallel for schedule(static) if (rows * E > kParallelMin)
  for (int64_t j0 = 0; j0 < E; j0 += kExpertBlock)
    for (int64_t i = 0; i < rows; ++i) {
      const double a = alpha[i];
      const float* s = scores + i * E;
      for (int64_t j = j0; j < std::min(E, j0 + kExpertBlock); ++j)
        ++hist[j * kBins + bin(a - static_cast<double>(s[j]), lo, hi)];
    }
  int64_t* load = hist + E * kBins;
  for (int64_t p = 0; p < rows * k_; ++p) ++load[ids[p]];
  counts_.back() += rows;
}

const ExpertLoadStats& QuantileBalancer::update(float* bias, const CountReducer& reduce) {
  allocate();
  if (reduce) reduce(counts_);
  const int64_t E = experts_, m = tokens();
  record_stats(static_cast<size_t>(E * kBins));
  if (m == 0) return last_;

  const double q = static_cast<double>(m) * static_cast<double>(k_) / static_cast<double>(E);
  const int64_t R = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q)));
  const double lo = lo_, width = static_cast<double>(hi_) - lo;
  std::vector<double> target(static_cast<size_t>(E));
  double mean = 0;
  for (int64_t j = 0; j < E; ++j) {
    const int64_t* h = counts_.data() + j * kBins;
    int64_t beta = 0, before = 0;  // the first bin whose cumulative count reaches R
    while (beta < kBins - 1 && before + h[beta] < R) before += h[beta++];
    const double frac = std::clamp(
        (q - static_cast<double>(before)) / static_cast<double>(std::max<int64_t>(1, h[beta])), 0.0,
        1.0);
    target[static_cast<size_t>(j)] = lo + (static_cast<double>(beta) + frac) * width / kBins;
    mean += target[static_cast<size_t>(j)];
  }
  mean /= static_cast<double>(E);
  float bmin = INFINITY, bmax = -INFINITY;
  for (int64_t j = 0; j < E; ++j) {
    bias[j] = static_cast<float>(target[static_cast<size_t>(j)] - mean);
    bmin = std::min(bmin, bias[j]);
    bmax = std::max(bmax, bias[j]);
  }
  lo_ = bmin - 1.f;
  hi_ = bmax + 1.f;
  std::fill(counts_.begin(), counts_.end(), 0);
  return last_;
}

void QuantileBalancer::set_range(float lo, float hi) {
  K3_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "quantile balancing range [", lo,
           ", ", hi, "]: expected finite bounds with lo < hi");
  lo_ = lo;
  hi_ = hi;
}

void QuantileBalancer::restore(std::span<const float> state) {
  K3_CHECK(state.size() == 2, "quantile balancing range: expected 2 values, found ", state.size());
  set_range(state[0], state[1]);
}

}  // namespace k3::model
