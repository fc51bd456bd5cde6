// The balancers of a MoE layer's router bias b (math §6): b only selects experts (top-k of s + b),
// no gradient reaches it, and once per global batch a balancer sets it from what the training
// forwards routed. Two kinds, chosen by the model config's moe_balancer:
//   "quantile"  Quantile Balancing (quantile_balancing.h), K3's;
//   "bias"      the sign update of auxiliary-loss-free balancing (bias_balancing.h), K2's.
// Both count the tokens each expert received and report the same load statistics.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace k3::model {

struct ModelConfig;

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

class RouterBalancer {
 public:
  virtual ~RouterBalancer() = default;

  // One training forward of `rows` tokens: router scores s [rows, E], their cutoffs α [rows]
  // (from select_top_k) and the chosen experts ids [rows, k].
  virtual void observe(const float* scores, const float* alpha, const int32_t* ids,
                       int64_t rows) = 0;

  // Everything observe() gathered since the last update, as one buffer of integer counts that
  // ends with the token count m. A rank-local sum, until reduced.
  std::span<int64_t> counts() {
    allocate();
    return counts_;
  }
  int64_t tokens() const { return counts_.empty() ? 0 : counts_.back(); }

  // Once per global batch, after the optimizer step: reduce(counts()) (the hook for data- and
  // context-parallel ranks; none means one rank), then the update of bias [E], and the counts
  // restart at zero. With m = 0 the bias is kept. Returns (and keeps) the batch's load statistics.
  virtual const ExpertLoadStats& update(float* bias, const CountReducer& reduce = nullptr) = 0;
  const ExpertLoadStats& last_stats() const { return last_; }
  // Drops what observe() gathered since the last update (a step skipped as non-finite): the bias
  // stays, and the next update counts only the steps after it.
  void discard() { std::fill(counts_.begin(), counts_.end(), 0); }

  // What a checkpoint must keep beside the bias, as fp32 under the layer's prefix + "." +
  // state_name() (empty state: nothing). restore() throws k3::Error on a state it cannot take.
  virtual const char* state_name() const = 0;
  virtual std::vector<float> state() const = 0;
  virtual void restore(std::span<const float> state) = 0;

 protected:
  RouterBalancer(int64_t experts, int64_t k, size_t counts);  // requires experts > k >= 1
  // The load statistics of the counts' load [E] (at `load_at`) and token count.
  const ExpertLoadStats& record_stats(size_t load_at);

  // The counts are zeroed at first use, not at construction: a model described without
  // allocation (a plan, a pre-flight estimate) never touches them, and for K3 they are 7 MB a
  // layer. observe() and update() call it first.
  void allocate() {
    if (counts_.empty()) counts_.assign(size_, 0);
  }

  int64_t experts_ = 0, k_ = 0;
  size_t size_ = 0;              // the counts' length
  std::vector<int64_t> counts_;  // empty until allocate()
  ExpertLoadStats last_;
};

// The balancer c.moe_balancer names, for a layer of c's experts.
std::unique_ptr<RouterBalancer> make_balancer(const ModelConfig& c);
// The int64 counts that balancer keeps per MoE layer.
int64_t balancer_counts(const ModelConfig& c);

}  // namespace k3::model
