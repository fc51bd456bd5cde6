// Causal multi-head softmax attention with a sigmoid output gate, no positional encoding (K3 is
// NoPE): out = o_proj(attn(q, k, v) ⊙ sigmoid(g_proj x)). The full-attention layer of the dense
// decoder; gated MLA replaces its projections, not its shape.
#pragma once

#include <cstdint>
#include <string>

#include "k3/model/config.h"
#include "k3/model/layers/linear.h"

namespace k3 {

class GatedAttention {
 public:
  GatedAttention() = default;
  GatedAttention(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c);

  // x, out: [B*T, hidden]. Saves what backward needs under prefix.
  void forward(const Step& s, const float* x, int64_t B, int64_t T, float* out) const;
  // dx is written.
  void backward(const Step& s, const float* dout, int64_t B, int64_t T, float* dx) const;

  // Decode support: the keys and values of `rows` new tokens (for a cache), and the gated output
  // for queries attending to `ctx` cached positions.
  void project_kv(const Step& s, const float* x, int64_t rows, float* k, float* v) const;
  void decode(const Step& s, const float* x, int64_t rows, const float* k_cache,
              const float* v_cache, int64_t first_pos, float* out) const;

 private:
  std::string prefix_;
  int64_t heads_ = 0, head_dim_ = 0, hidden_ = 0;
  Linear q_, k_, v_, g_, o_;
};

}  // namespace k3
