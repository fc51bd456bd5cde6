// Causal multi-head softmax attention, the full-attention layer of the dense decoder; gated MLA
// replaces its projections, not its shape. K3's form is NoPE with a sigmoid output gate:
// out = o_proj(attn(q, k, v) ⊙ sigmoid(g_proj x)). The config switches the two off for Llama
// (mla_use_output_gate, mla_use_nope: then rotary embeddings turn q and k, layers/rotary.h), and
// num_key_value_heads groups the heads: each group of num_attention_heads / num_key_value_heads
// query heads shares one head of keys and values (grouped-query attention). Under tensor
// parallelism the query heads and the key-value heads are split over tp: q, k, v and g
// column-parallel, o row-parallel, one region (tp_region.h).
#pragma once

#include <cstdint>
#include <string>

#include "k3/model/config.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/mixer.h"
#include "k3/model/layers/rotary.h"

namespace k3::model {

class GatedAttention final : public Mixer {
 public:
  GatedAttention(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c);

  // Each row one sequence, its positions from 0: packed documents (seq.doc_starts) are refused.
  void forward(const Step& s, const float* x, const Sequences& seq, float* out) const override;
  void backward(const Step& s, const float* dout, const Sequences& seq, float* dx) const override;
  // The cache holds every token's keys and values (rotated): [max_len, kv_heads * head_dim] each.
  std::unique_ptr<DecodeCache> make_cache(int64_t max_len) const override;
  void decode(const Step& s, const float* x, int64_t rows, DecodeCache& cache,
              float* out) const override;
  void decode_batch(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                    float* out) const override;

 private:
  // forward, and a prefill when cache is not null: its first B·T rows receive k and v (B = 1).
  void run(const Step& s, const float* x, int64_t B, int64_t T, DecodeCache* cache,
           float* out) const;
  // Row r of x is the token at position positions[r] of the sequence of caches[r]: its k and v
  // are appended there, then it attends to that cache's positions [0, positions[r]].
  void decode_rows(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                   std::span<const int64_t> positions, float* out) const;
  int64_t group() const { return heads_ / kv_heads_; }  // query heads per key-value head
  // The layout of [rows, heads, head_dim] for the rotation.
  kernels::RopeLayout heads_layout(int64_t rows, int64_t heads) const {
    return {rows, heads, head_dim_, heads * head_dim_, head_dim_};
  }
  std::string prefix_;
  // heads_, kv_heads_: this rank's (split over tp)
  int64_t heads_ = 0, kv_heads_ = 0, head_dim_ = 0, hidden_ = 0;
  bool gated_ = true;
  Rotary rope_;
  Linear q_, k_, v_, g_, o_;  // g_ unset without the gate
};

}  // namespace k3::model
