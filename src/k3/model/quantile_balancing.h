// Quantile Balancing (math §6): the router bias b of a MoE layer, steered without an auxiliary
// loss. Every training forward adds, per token i and expert j, r_ij = α_i − s_ij (the bias j would
// need to tie the token's cutoff α_i, the (k+1)-th largest s_i + b) to a histogram C [E × 1000]
// over [lo, hi]. Once per global batch, b_j becomes the (m·k/E)-th smallest r_·j, read off C with
// linear interpolation inside its bin, then centred; the range follows b. Each expert's expected
// load then approaches m·k/E.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace k3::model {

// The biased top-k selection of one token (math §5 step 2): writes the k experts with the largest
// s + b to ids[0, k), best first, ties to the lower index, and uses ids[k] as scratch (ids has
// room for k + 1). Returns α, the (k+1)-th largest s + b. Requires experts > k.
float select_top_k(const float* s, const float* b, int64_t experts, int64_t k, int32_t* ids);

// Expert load of one MoE layer over one global batch.
struct ExpertLoadStats {
  int64_t tokens = 0;                  // m: tokens routed
  std::vector<int64_t> load;           // token-slots routed to each expert (they sum to m·k)
  double maxvio = 0;                   // max_e load_e / mean load − 1; 0 when no token was routed
  int64_t min_load = 0, max_load = 0;  // of the least and the most loaded expert
  int64_t idle = 0;                    // experts that received no token

  static ExpertLoadStats of(std::vector<int64_t> load, int64_t tokens);
};

// Sums a count buffer over the data- and context-parallel ranks, in place.
using CountReducer = std::function<void(std::span<int64_t> counts)>;

class QuantileBalancer {
 public:
  static constexpr int64_t kBins = 1000;

  QuantileBalancer() = default;
  QuantileBalancer(int64_t experts, int64_t k);  // requires experts > k >= 1

  // bin(r) = clamp(floor((r − lo)·1000/(hi − lo)), 0, 999); non-finite r falls in an end bin.
  static int64_t bin(double r, double lo, double hi);

  // One training forward of `rows` tokens: router scores s [rows, E], their cutoffs α [rows]
  // (from select_top_k) and the chosen experts ids [rows, k].
  void observe(const float* scores, const float* alpha, const int32_t* ids, int64_t rows);

  // Everything observe() gathered since the last update, as one buffer: the histogram
  // [E × 1000], then the load [E], then the token count m. A rank-local sum, until reduced.
  std::span<int64_t> counts() { return counts_; }
  int64_t histogram(int64_t expert, int64_t bin) const {
    return counts_[static_cast<size_t>(expert * kBins + bin)];
  }
  int64_t tokens() const { return counts_.back(); }

  // Once per global batch, after the optimizer step: reduce(counts()) (the hook for data- and
  // context-parallel ranks; none means one rank), then the math §6 update of bias [E] and of the
  // range, and the counts restart at zero. With m = 0 the bias and range are kept. Returns (and
  // keeps) the batch's load statistics.
  const ExpertLoadStats& update(float* bias, const CountReducer& reduce = nullptr);
  const ExpertLoadStats& last_stats() const { return last_; }

  // The range [lo, hi] is the state a checkpoint must keep beside the bias (fp32 [2]).
  float lo() const { return lo_; }
  float hi() const { return hi_; }
  void set_range(float lo, float hi);  // throws k3::Error unless finite with lo < hi

 private:
  int64_t experts_ = 0, k_ = 0;
  float lo_ = -1.f, hi_ = 1.f;
  std::vector<int64_t> counts_;
  ExpertLoadStats last_;
};

}  // namespace k3::model
