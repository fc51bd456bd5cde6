// Gated multi-head latent attention, no positional encoding (math §4): the full-attention layer of
// K3. Queries and keys/values come through low-rank bottlenecks; the keys share one d_r-wide part
// k_r across heads, so a decode cache needs only the kv latent and k_r per token. The output is
// gated like GatedAttention's: out = o_proj(attn ⊙ sigmoid(g_proj x)). DeepSeek-V3's MLA is the
// same layer with the config's two switches off (mla_use_output_gate, mla_use_nope): no gate, and
// rotary embeddings turn each head's q_r and the shared k_r by the token's position
// (layers/rotary.h; the decode cache holds k_r turned). Under tensor parallelism
// the heads are split over tp (q_b_proj, kv_b_proj and g_proj column-parallel, o_proj
// row-parallel, one region: tp_region.h); the down-projections, their norms and k_r are
// replicated, computed by every rank. Under context parallelism the attention runs as ring
// attention over the cp group (context/ring_attention.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "k3/model/config.h"
#include "k3/model/context/ring_attention.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/mixer.h"
#include "k3/model/layers/norm.h"
#include "k3/model/layers/rotary.h"
#include "k3/tensor/tensor.h"

namespace k3::model {

// What decoding keeps of one sequence: r_kv + d_r floats per token, whatever the head count.
struct MlaCache final : DecodeCache {
  int64_t max_len = 0;
  Tensor c_kv;  // [max_len, r_kv]: kv_a_layernorm(c_kv), i.e. normalized and weighted
  Tensor k_r;   // [max_len, d_r]
};

class GatedMLA final : public Mixer {
 public:
  // prefix: model.layers.N.self_attn. Throws k3::Error naming the first MLA field that is not
  // positive.
  GatedMLA(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c);

  // x, out: [B*T, hidden]. Saves what backward needs under prefix. With packed documents
  // (seq.doc_starts) each token attends only to its own document.
  void forward(const Step& s, const float* x, const Sequences& seq, float* out) const override;
  // dx is written; parameter gradients are accumulated.
  void backward(const Step& s, const float* dout, const Sequences& seq, float* dx) const override;

  // An MlaCache.
  std::unique_ptr<DecodeCache> make_cache(int64_t max_len) const override;
  // Appends `rows` tokens of one sequence at positions cache.length.. (each attends to every cached
  // position up to its own) and advances cache.length. cache must come from make_cache.
  // x, out: [rows, hidden]. Saves nothing.
  void decode(const Step& s, const float* x, int64_t rows, DecodeCache& cache,
              float* out) const override;
  void decode_batch(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                    float* out) const override;

 private:
  // Row r of x is the token at position positions[r] of the sequence of caches[r]: its latents
  // are appended there, then it attends to that cache's positions [0, positions[r]].
  void decode_rows(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                   std::span<const int64_t> positions, float* out) const;
  // Under context parallelism (ring attention, context/ring_attention.h): this rank's T tokens
  // of each row are two zig-zag chunks; kv_b_proj expands the blocks the ring brings.
  RingShape ring_shape(int64_t B, int64_t T, std::span<const int64_t> doc_starts,
                       kernels::Precision precision) const;
  // forward, and a prefill when cache is not null: its first B·T rows receive the latents (B = 1).
  void run(const Step& s, const float* x, int64_t B, int64_t T, std::span<const int64_t> doc_starts,
           MlaCache* cache, float* out) const;
  void run_backward(const Step& s, const float* dout, int64_t B, int64_t T,
                    std::span<const int64_t> doc_starts, float* dx) const;
  ExpandKv expand_kv(const Step& s) const;
  ExpandKvBackward expand_kv_backward(const Step& s) const;
  // q_r of each head and k_r turned by their positions, or (backward) their gradients turned back.
  void rotate(const int64_t* positions, int64_t n, float* q, float* k_r, bool backward) const;

  std::string prefix_;
  int64_t hidden_ = 0, heads_ = 0;  // heads_: this rank's (split over tp)
  int64_t d_n_ = 0, d_r_ = 0, d_v_ = 0, r_kv_ = 0;
  bool gated_ = true;
  Rotary rope_;
  Linear q_a_, q_b_, kv_a_, kv_b_, g_, o_;  // g_ unset without the gate
  RMSNorm q_norm_, kv_norm_;
};

}  // namespace k3::model
