// Quantile Balancing (math §6): the router bias b of a MoE layer, steered without an auxiliary
// loss. Every training forward adds, per token i and expert j, r_ij = α_i − s_ij (the bias j would
// need to tie the token's cutoff α_i, the (k+1)-th largest s_i + b) to a histogram C [E × 1000]
// over [lo, hi]. Once per global batch, b_j becomes the (m·k/E)-th smallest r_·j, read off C with
// linear interpolation inside its bin, then centred; the range follows b. Each expert's expected
// load then approaches m·k/E.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/model/balancing.h"

namespace k3::model {

// The biased top-k selection of one token (math §5 step 2): writes the k experts with the largest
// s + b to ids[0, k), best first, ties to the lower index, and uses ids[k] as scratch (ids has
// room for k + 1). Returns α, the (k+1)-th largest s + b. Requires experts > k.
float select_top_k(const float* s, const float* b, int64_t experts, int64_t k, int32_t* ids);

class QuantileBalancer final : public RouterBalancer {
 public:
  static constexpr int64_t kBins = 1000;

  QuantileBalancer(int64_t experts, int64_t k);  // requires experts > k >= 1

  // bin(r) = clamp(floor((r − lo)·1000/(hi − lo)), 0, 999); non-finite r falls in an end bin.
  static int64_t bin(double r, double lo, double hi);

  // Counts: the histogram [E × 1000], then the load [E], then the token count m.
  void observe(const float* scores, const float* alpha, const int32_t* ids, int64_t rows) override;
  int64_t histogram(int64_t expert, int64_t bin) const {
    return counts_.empty() ? 0 : counts_[static_cast<size_t>(expert * kBins + bin)];
  }

  // The math §6 update of bias [E] and of the range (see RouterBalancer::update).
  const ExpertLoadStats& update(float* bias, const CountReducer& reduce = nullptr) override;

  // The range [lo, hi] is the state a checkpoint must keep beside the bias (fp32 [2]).
  float lo() const { return lo_; }
  float hi() const { return hi_; }
  void set_range(float lo, float hi);  // throws k3::Error unless finite with lo < hi
  const char* state_name() const override { return "quantile_balancing.range"; }
  std::vector<float> state() const override { return {lo_, hi_}; }
  void restore(std::span<const float> state) override;

 private:
  float lo_ = -1.f, hi_ = 1.f;
};

}  // namespace k3::model
