#include "k3/model/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include "k3/base/arena.h"
#include "k3/kernels/kda/delta_rule.h"

namespace k3::model {
namespace {

// Floats of one layer part: what its forward allocates (all of it stays in the arena until the
// step ends) and the scratch its backward allocates on top (freed when that backward returns).
struct PartFloats {
  double forward = 0, backward = 0;
};

PartFloats mixer_floats(const ModelConfig& c, MixerKind kind, double B, double T) {
  const double n = B * T;
  switch (kind) {
    case MixerKind::GatedAttention: {
      const double H = static_cast<double>(c.num_attention_heads),
                   p = H * static_cast<double>(c.head_dim);
      return {6 * n * p + n * H, 6 * n * p};
    }
    case MixerKind::GatedMLA: {
      const double H = static_cast<double>(c.num_attention_heads),
                   rq = static_cast<double>(c.q_lora_rank),
                   rkv = static_cast<double>(c.kv_lora_rank),
                   dn = static_cast<double>(c.qk_nope_head_dim),
                   dr = static_cast<double>(c.qk_rope_head_dim),
                   dv = static_cast<double>(c.v_head_dim), p = H * dv;
      return {n * (2 * rq + H * (dn + dr) + 2 * rkv + dr + H * dn + 4 * p + H + 2),
              n * (4 * p + H * (dn + dr) + H * dn + 2 * dr + 2 * rq + H * (dn + dv) + 3 * rkv)};
    }
    case MixerKind::KDA: {
      const double H = static_cast<double>(c.kda_num_heads),
                   D = static_cast<double>(c.kda_head_dim), P = H * D,
                   chunk = static_cast<double>(kernels::kda::kChunk);
      const double chunks = B * std::ceil(T / chunk);
      const double records = chunks * H * (D * D + 2 * chunk * D + 3 * chunk * chunk);
      return {11 * n * P + 4 * n * H + n * D + records, 9 * n * P + n * H + n * D};
    }
  }
  return {};
}

PartFloats ffn_floats(const ModelConfig& c, FfnKind kind, double n) {
  if (kind == FfnKind::LatentMoE) {
    const LatentMoE::ArenaUse u = LatentMoE::arena_use(c, static_cast<int64_t>(n));
    return {u.kept, u.scratch};
  }
  const double W = static_cast<double>(c.intermediate_size);
  return {3 * n * W, 3 * n * W};
}

}  // namespace

// The step arena is a bump allocator that forward_backward rewinds only when it returns (and each
// layer's backward, and the LM head's loss, to where they began), so its peak is
//   everything forward allocates  +  dh, the head's gradient kept for the backward
//   + the larger of the head's logits chunk and, in the backward, backward_stack's buffers (dP,
//     tmp, da_in; one gradient per Attention Residuals block) and the largest scratch of any one
//     layer's backward.
// In floats, with n = B·T tokens and d = hidden_size, forward allocates the embedding nd, the final
// norm's output nd and rstd n, and per layer:
//   residual stream: a_in, A, m_in, F = 4nd and the two norms' rstd 2n; with Attention Residuals
//     also the two mixed inputs 2nd and their softmax weights n·(blocks so far + 1) per mix;
//   gated attention (p = H·head_dim): q k v g o y = 6np, lse nH; backward 6np;
//   gated MLA (p = H·d_v): 2n·r_q + nH(d_n + d_r) + n(2r_kv + d_r) + nH·d_n + 4np + nH + 2n;
//     backward 4np + nH(d_n + d_r) + nH·d_n + 2n·d_r + 2n·r_q + nH(d_n + d_v) + 3n·r_kv;
//   KDA (P = H·D): 11nP + 4nH + nD + the chunk records B·⌈T/64⌉·H·(D² + 2·64·D + 3·64²);
//     backward 9nP + nH + nD;
//   dense GLU of width W: 3nW; backward 3nW;
//   LatentMoE: LatentMoE::arena_use.
// A backward of a norm that accumulates takes nd of scratch. Each allocation rounds up to 64
// bytes: 64 allocations per layer are counted for that.
double activation_bytes(const ModelConfig& c, int64_t B_in, int64_t T_in) {
  const double B = static_cast<double>(B_in), T = static_cast<double>(T_in), n = B * T;
  const double d = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  const bool attn_res = c.attn_res_block_size > 0;
  const int64_t layers = c.num_hidden_layers;
  const double blocks =
      attn_res ? static_cast<double>((layers + c.attn_res_block_size - 1) / c.attn_res_block_size)
               : 0;

  double forward = n * d + n * d + n;                 // embedding; final norm's output and rstd
  if (attn_res) forward += n * d + n * (blocks + 1);  // the output mix and its weights
  double widest_backward = n * d;                     // a norm's accumulating backward
  if (attn_res) widest_backward = std::max(widest_backward, n * (blocks + 1));
  for (int64_t l = 0; l < layers; ++l) {
    forward += 4 * n * d + 2 * n;
    if (attn_res) {
      const double bank =
          static_cast<double>(l / c.attn_res_block_size) + 1;  // after layer l's push
      forward += 2 * n * d + 2 * n * (bank + 1);
    }
    for (PartFloats part :
         {mixer_floats(c, mixer_kind(c, l), B, T), ffn_floats(c, ffn_kind(c, l), n)}) {
      forward += part.forward;
      widest_backward = std::max(widest_backward, part.backward);
    }
  }
  const double logits = static_cast<double>(LmHead::chunk_rows(c.vocab_size)) * V, dh = n * d;
  const double backward_stack = (blocks + 3) * n * d;
  const double alignment = 64.0 * Arena::kAlign * static_cast<double>(layers + 1);
  return (forward + dh + std::max(logits, backward_stack + widest_backward)) * sizeof(float) +
         alignment;
}

ModelMemory model_memory(const Model& model, int64_t B, int64_t T) {
  const ParamRegistry& p = model.params();
  const ModelConfig& c = model.config();
  const double flat_bytes = static_cast<double>(p.flat_size()) * sizeof(float);
  double moe_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    moe_layers += ffn_kind(c, l) == FfnKind::LatentMoE;
  // Per MoE layer: a histogram of kBins per expert, the loads [E] and the token count (int64).
  const double histogram =
      (static_cast<double>(c.num_experts) * (QuantileBalancer::kBins + 1) + 1) * sizeof(int64_t);
  return {p.total_numel(), flat_bytes, flat_bytes, activation_bytes(c, B, T),
          moe_layers * histogram};
}

}  // namespace k3::model
