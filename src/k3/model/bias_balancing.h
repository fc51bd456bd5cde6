// Auxiliary-loss-free balancing by the bias's sign update (moe_balancer = "bias"), as K2 and
// DeepSeek-V3 balance their routers: every training forward counts the token-slots load_j routed
// to each expert; once per global batch of m tokens, with mean load m·k/E,
//   b_j += u · sign(mean load − load_j),   u = moe_bias_update_rate,
// so an overloaded expert's bias falls by u and an underloaded one's rises by u. The bias is the
// whole state (checkpointed as a parameter); the counts restart every global batch.
#pragma once

#include <cstdint>

#include "k3/model/balancing.h"

namespace k3::model {

class BiasBalancer final : public RouterBalancer {
 public:
  BiasBalancer(int64_t experts, int64_t k, double rate);  // requires experts > k >= 1, rate > 0

  // Counts: the load [E], then m.
  void observe(const float* scores, const float* alpha, const int32_t* ids, int64_t rows) override;
  const ExpertLoadStats& update(float* bias, const CountReducer& reduce = nullptr) override;

  const char* state_name() const override { return "bias_balancing"; }
  std::vector<float> state() const override { return {}; }
  void restore(std::span<const float> state) override;

 private:
  float rate_;
};

}  // namespace k3::model
