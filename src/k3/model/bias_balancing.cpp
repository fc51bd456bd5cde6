#include "k3/model/bias_balancing.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"

namespace k3::model {

BiasBalancer::BiasBalancer(int64_t experts, int64_t k, double rate)
    : RouterBalancer(experts, k, static_cast<size_t>(experts + 1)),
      rate_(static_cast<float>(rate)) {
  K3_CHECK(rate > 0 && std::isfinite(rate),
           "bias balancing: the update rate must be positive, got ", rate);
}

void BiasBalancer::observe(const float*, const float*, const int32_t* ids, int64_t rows) {
  allocate();
  for (int64_t p = 0; p < rows * k_; ++p) ++counts_[static_cast<size_t>(ids[p])];
  counts_.back() += rows;
}

const ExpertLoadStats& BiasBalancer::update(float* bias, const CountReducer& reduce) {
  allocate();
  if (reduce) reduce(counts_);
  record_stats(0);
  const int64_t m = tokens();
  if (m > 0) {
    // load_j < m·k/E  <=>  load_j · E < m·k: compared in integers, so a tie is exact.
    const int64_t total = m * k_;
    for (int64_t j = 0; j < experts_; ++j) {
      const int64_t scaled = counts_[static_cast<size_t>(j)] * experts_;
      bias[j] += scaled < total ? rate_ : scaled > total ? -rate_ : 0.f;
    }
  }
  std::fill(counts_.begin(), counts_.end(), 0);
  return last_;
}

void BiasBalancer::restore(std::span<const float> state) {
  K3_CHECK(state.empty(), "bias balancing keeps no state beside the bias, found ", state.size(),
           " values");
}

}  // namespace k3::model
