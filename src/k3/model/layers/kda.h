// Kimi Delta Attention (math §3), the linear-attention mixer of K3, with K3's tensor names
// under prefix = model.layers.N.self_attn (P = H·D):
//   q_proj, k_proj, v_proj [P, d]; q_conv1d, k_conv1d, v_conv1d [P, 1, K_c]; f_a_proj [D, d];
//   f_b_proj [P, D]; b_proj [H, d]; A_log [H]; dt_bias [P]; o_norm [D]; g_proj [P, d]; o_proj [d,
//   P].
// Per token: q, k, v = SiLU(short conv(projections)); q and k L2-normalized per head (q also
// scaled by D^{−1/2}); log-decay g from the gate (kernels/kda/gate.h) on f_b(f_a x); β = σ(b x);
// the gated delta rule per head; a per-head RMSNorm gated by σ(g_proj x); then o_proj.
// Decoding keeps, per sequence, the three convolution windows and the H recurrent states: a fixed
// size, whatever the context length.
// Under tensor parallelism the heads are split over tp, and everything per head or per channel
// follows them (projections, convolutions, A_log, dt_bias, β, the gate); o_proj is row-parallel;
// f_a_proj and o_norm are replicated. One region (tp_region.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "k3/kernels/kda/decode.h"
#include "k3/model/config.h"
#include "k3/model/context/halo.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/mixer.h"
#include "k3/tensor/tensor.h"

namespace k3::model {

// What decoding keeps for `batch` sequences.
struct KdaCache final : DecodeCache {
  int64_t batch = 0;
  Tensor q_window, k_window, v_window;  // [batch, K_c − 1, P]: the last inputs of each conv
  Tensor state;                         // [batch, H, D, D]: the delta-rule state S
};

class KimiDeltaAttention final : public Mixer {
 public:
  // Throws k3::Error naming the linear_attn_config field when KDA is not configured.
  KimiDeltaAttention(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c);

  // x, out: [B*T, hidden]. Saves what backward needs under prefix. With packed documents
  // (seq.doc_starts) each document starts from zero state and zero convolution windows; under
  // context parallelism seq.T is this rank's tokens, its two zig-zag spans.
  void forward(const Step& s, const float* x, const Sequences& seq, float* out) const override;
  // dx is written; parameter gradients accumulate.
  void backward(const Step& s, const float* dout, const Sequences& seq, float* dx) const override;

  // Decoding state for one sequence (the model's interface; max_len does not matter to KDA).
  std::unique_ptr<DecodeCache> make_cache(int64_t max_len) const override;
  KdaCache make_batch_cache(int64_t batch) const;  // zero windows and states
  // The chunked path over T more tokens of each of cache.batch sequences, continuing from the
  // cache and advancing it. x, out: [batch*T, hidden]. Saves nothing.
  void prefill(const Step& s, const float* x, int64_t T, KdaCache& cache, float* out) const;
  // One more token of each sequence through the fused step. x, out: [batch, hidden].
  void decode_step(const Step& s, const float* x, KdaCache& cache, float* out) const;
  // `rows` tokens of one sequence (a KdaCache of batch 1): decode_step for one, prefill for more.
  void decode(const Step& s, const float* x, int64_t rows, DecodeCache& cache,
              float* out) const override;
  // One token of each of several sequences, each with its own cache from make_cache.
  void decode_batch(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                    float* out) const override;

 private:
  // Every projection of x [n, hidden] (the gate's first half, f_a, not yet f_b).
  struct Projections {
    float *q, *k, *v, *fa, *beta, *gate;
  };
  void project(const Step& s, const float* x, int64_t n, const Projections& out) const;
  // forward, packed forward and prefill: cache (may be null) supplies the starting windows and
  // states and receives the final ones.
  void run(const Step& s, const float* x, int64_t B, int64_t T, std::span<const int64_t> doc_starts,
           KdaCache* cache, float* out) const;
  void run_backward(const Step& s, const float* dout, int64_t B, int64_t T,
                    std::span<const int64_t> doc_starts, float* dx) const;
  // Under context parallelism (context/halo.h): the convolutions' windows of this rank's T
  // tokens of each of B rows, two zig-zag spans, with the documents of each (or none).
  ConvHalo conv_halo(int64_t B, int64_t T, std::span<const SpanDocuments> pieces) const;
  kernels::kda::DecodeState sequence_state(KdaCache& cache, int64_t b) const;
  // One token of each sequence whose state is states[b]: x, out [states.size(), hidden].
  void step_sequences(const Step& s, const float* x,
                      std::span<const kernels::kda::DecodeState> states, float* out) const;

  std::string prefix_;
  int64_t hidden_ = 0, heads_ = 0, head_dim_ = 0, conv_kernel_ = 0;  // heads_: this rank's
  bool bounded_gate_ = true;
  float lower_bound_ = -5.0f, norm_eps_ = 1e-5f;
  Linear q_, k_, v_, f_a_, f_b_, b_, g_, o_;
  int q_conv_ = -1, k_conv_ = -1, v_conv_ = -1, A_log_ = -1, dt_bias_ = -1, o_norm_ = -1;
};

}  // namespace k3::model
