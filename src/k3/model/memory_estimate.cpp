#include "k3/model/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include "k3/base/arena.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/model/context/kcp.h"

namespace k3::model {
namespace {

// Floats of one layer part: what its forward saves for the backward (`exact` of it never stored
// lossily) and the scratch its backward allocates on top (freed when that backward returns).
struct PartFloats {
  double forward = 0, exact = 0, backward = 0;
};

PartFloats mixer_floats(const ModelConfig& c, MixerKind kind, double B, double T, int cp) {
  const double n = B * T;
  switch (kind) {
    case MixerKind::GatedAttention: {
      const double H = static_cast<double>(c.num_attention_heads),
                   p = H * static_cast<double>(c.head_dim), pk = static_cast<double>(c.kv_dim()),
                   gates = c.mla_use_output_gate ? 2 : 0,
                   expanded = c.kv_heads() < c.num_attention_heads ? 4 * n * p : 0,
                   positions = c.rope() ? 2 * n : 0;
      return {(2 + gates) * n * p + 2 * n * pk + n * H, n * H,
              (2 + gates) * n * p + 2 * n * pk + expanded + positions};
    }
    case MixerKind::GatedMLA: {
      const double H = static_cast<double>(c.num_attention_heads),
                   rq = static_cast<double>(c.q_lora_rank),
                   rkv = static_cast<double>(c.kv_lora_rank),
                   dn = static_cast<double>(c.qk_nope_head_dim),
                   dr = static_cast<double>(c.qk_rope_head_dim),
                   dv = static_cast<double>(c.v_head_dim), p = H * dv,
                   gates = c.mla_use_output_gate ? 2 : 0, positions = c.rope() ? 2 : 0;
      PartFloats f{n * (2 * rq + H * (dn + dr) + 2 * rkv + dr + H * dn + (2 + gates) * p + H + 2),
                   n * (H + 2),
                   n * ((2 + gates) * p + H * (dn + dr) + H * dn + 2 * dr + 2 * rq + H * (dn + dv) +
                        3 * rkv + positions)};
      if (cp > 1) {  // ring attention saves the compressed cache instead of the expanded keys and
                     // values; its backward holds a block and its gradient, and the next of each
        f.forward += n * (rkv + dr) - n * (H * dn + p);
        f.backward += 4 * n * (rkv + dr);
      }
      return f;
    }
    case MixerKind::KDA: {
      const int64_t H = c.kda_num_heads, D = c.kda_head_dim;
      const double P = static_cast<double>(H * D), Hd = static_cast<double>(H);
      double records = 0;
      if (cp > 1) {  // KCP: two spans a rank, each with its chunk records, the gathered pairs,
                     // the incoming states and the convolutions' halos
        const KcpLayout layout{.ranks = cp, .rank = 0, .slots = 2, .documents = {}};
        const kernels::kda::DeltaRuleShape span{
            static_cast<int64_t>(B), static_cast<int64_t>(T) / 2, H, D, D, {}};
        records = static_cast<double>(kcp_records_floats(layout, span) +
                                      kcp_pair_floats(span) * layout.spans() +
                                      2 * kcp_state_floats(span));
        records += 6 * B * static_cast<double>(c.kda_short_conv_kernel_size - 1) * P;
      } else {
        records = static_cast<double>(kernels::kda::chunk_saved_floats(
            {static_cast<int64_t>(B), static_cast<int64_t>(T), H, D, D, {}}));
      }
      const double d = static_cast<double>(D);
      return {11 * n * P + 4 * n * Hd + n * d + records, 4 * n * Hd + records,
              9 * n * P + n * Hd + n * d};
    }
  }
  return {};
}

PartFloats ffn_floats(const ModelConfig& c, FfnKind kind, double n, const ActivationLayout& l) {
  if (kind == FfnKind::LatentMoE) {
    const LatentMoE::ArenaUse u = LatentMoE::arena_use(c, static_cast<int64_t>(n));
    const double E = static_cast<double>(c.num_experts),
                 pairs = n * static_cast<double>(c.num_experts_per_token),
                 F = static_cast<double>(c.moe_intermediate_size),
                 L = static_cast<double>(c.expert_dim());
    // Scores, routing, the latent norm's rstd.
    PartFloats f{u.kept, n * E + 2 * pairs + (c.moe_latent ? n : 0), u.scratch};
    if (l.ep > 1 && l.moonep) {  // S·K rows, and the replicas' weights and the group's loads
      const double held = static_cast<double>(l.replica_slots) * 3 * F * L + l.ep * E;
      f.forward += held;
      f.exact += held;
    } else if (l.ep > 1) {  // at most every rank's rows on this rank's experts
      f.forward += (l.ep - 1) * pairs * (2 * F + L);
    }
    return f;
  }
  const double W = static_cast<double>(c.intermediate_size);
  return {3 * n * W, 0, 3 * n * W};
}

// One micro-batch on one pipeline chunk, in floats: the stream between segments (held by the
// arena), each segment's saved tensors, and the scratch of the backward beside them.
struct ChunkFloats {
  double referenced = 0;
  double stack = 0;                  // held through every layer's backward
  double widest = 0;                 // the widest layer backward's scratch, on top of `stack`
  double head = 0;                   // the head's loss (last stage), instead of a layer's backward
  std::vector<PartFloats> segments;  // forward: saved, exact: of it never lossy
  double alignment = 0;              // bytes
  double saved() const {
    double s = 0;
    for (const PartFloats& p : segments) s += p.forward;
    return s;
  }
  double largest() const {
    double m = 0;
    for (const PartFloats& p : segments) m = std::max(m, p.forward);
    return m;
  }
  // Two segments next to each other: the one restored and the next one fetched ahead.
  double largest_pair() const {
    double m = largest();
    for (size_t i = 1; i < segments.size(); ++i)
      m = std::max(m, segments[i - 1].forward + segments[i].forward);
    return m;
  }
  // What the arena holds beyond the stream and the kept segments at its peak: a segment's
  // forward (its tensors are made in the arena; unless all are kept, they are stored elsewhere
  // and rewound at its end), or the backward's scratch; under recompute a segment re-runs on top
  // of the backward's stack.
  double peak_scratch(activation::Policy policy) const {
    const double layer =
        policy == activation::Policy::Recompute ? std::max(widest, largest()) : widest;
    const double forward = policy == activation::Policy::Keep ? 0 : largest();
    return std::max({forward, head, stack + layer});
  }
};

ChunkFloats chunk_floats(const ModelConfig& c, const ActivationLayout& l, int64_t first,
                         int64_t end) {
  const double B = static_cast<double>(l.rows), T = static_cast<double>(l.tokens), n = B * T;
  // The residual stream's rows: under sequence parallelism this rank's share of the tokens (the
  // parts gather them all).
  const double ns = l.sequence_parallel ? n / l.tp : n;
  const double d = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  const bool attn_res = c.attn_res_block_size > 0;
  const double blocks =
      attn_res ? static_cast<double>((c.num_hidden_layers + c.attn_res_block_size - 1) /
                                     c.attn_res_block_size)
               : 0;
  ChunkFloats f;
  if (first == 0) f.referenced += ns * d;
  double widest_backward = ns * d;  // a norm's accumulating backward
  if (attn_res) widest_backward = std::max(widest_backward, ns * (blocks + 1));
  // The last chunk runs the multi-token prediction modules' decoder layers too.
  const int64_t last = end == c.num_hidden_layers ? end + c.num_nextn_predict_layers : end;
  for (int64_t layer = first; layer < last; ++layer) {
    // Each half saves its norm's input and rstd (with Attention Residuals also the mixed input
    // and its softmax weights) beside its part's tensors; its output is the stream.
    const double bank =
        static_cast<double>(layer / std::max<int64_t>(1, c.attn_res_block_size)) + 1;
    const PartFloats mixing{ns * d + ns + (attn_res ? ns * d + ns * (bank + 1) : 0),
                            ns + (attn_res ? ns * (bank + 1) : 0), 0};
    PartFloats halves[2] = {mixer_floats(c, mixer_kind(c, layer), B, T, l.cp),
                            ffn_floats(c, ffn_kind(c, layer), n, l)};
    for (PartFloats& h : halves) {
      h.forward += mixing.forward;
      h.exact += mixing.exact;
      widest_backward = std::max(widest_backward, h.backward);
    }
    if (l.granularity == activation::Granularity::Sublayer) {
      f.segments.insert(f.segments.end(), {halves[0], halves[1]});
      f.referenced += 2 * ns * d;
    } else {  // the stream between the halves is the layer's own
      f.segments.push_back(
          {halves[0].forward + halves[1].forward + ns * d, halves[0].exact + halves[1].exact, 0});
      f.referenced += ns * d;
    }
  }
  f.stack = (blocks + 3) * ns * d;
  f.widest = widest_backward;
  if (end == c.num_hidden_layers) {  // final norm, output mix, the head's gradient
    f.referenced += ns * d + ns + (attn_res ? ns * d + ns * (blocks + 1) : 0);
    const double logits = static_cast<double>(LmHead::chunk_rows(c.vocab_size)) * V, dh = ns * d;
    f.stack += dh;
    f.head = dh + logits;
  }
  f.alignment = 64.0 * Arena::kAlign * static_cast<double>(end - first + 1);
  return f;
}

// The bytes of `in_flight` micro-batches on chunk f under one policy. Each micro-batch has its
// own arena (a pipeline region), whose peak is its stream and its largest scratch; kept tensors
// stay with their micro-batch in the pool, where a segment's restored tensors (decoded, fetched or
// re-run) are one at a time.
double held_bytes(const ChunkFloats& f, activation::Policy policy, int in_flight) {
  double stored = 0, restored = 0;
  switch (policy) {
    case activation::Policy::Keep:
      stored = f.saved();
      break;
    case activation::Policy::Fp8:  // a byte and a float scale per 128 values
      for (const PartFloats& p : f.segments)
        stored += p.exact + (p.forward - p.exact) * (1.0 + 4.0 / 128) / sizeof(float);
      restored = f.largest();
      break;
    case activation::Policy::Bf16:  // two bytes a value
      for (const PartFloats& p : f.segments) stored += p.exact + (p.forward - p.exact) / 2;
      restored = f.largest();
      break;
    case activation::Policy::Recompute:
      restored = f.largest();
      break;
    case activation::Policy::Offload:
      restored = f.largest_pair();
      break;
  }
  return (in_flight * (f.referenced + f.peak_scratch(policy) + stored) + restored) * sizeof(float) +
         in_flight * f.alignment;
}

// One tp rank's share of the parts: its heads, its columns of the MLPs and experts, its rows of
// the vocabulary.
ModelConfig tp_shard(ModelConfig c, int tp) {
  c.num_attention_heads /= tp;
  c.num_key_value_heads /= tp;
  c.kda_num_heads /= tp;
  c.intermediate_size /= tp;
  c.moe_intermediate_size /= tp;
  c.vocab_size /= tp;
  return c;
}

}  // namespace

// The step arena is a bump allocator that forward_backward rewinds only when it returns (and each
// segment's forward, each layer's backward, and the LM head's loss, to where they began), and the
// activation manager's pool holds what segments saved. Per micro-batch in flight (each in its own
// pipeline region) the arena holds the stream between segments and the segments whose tensors are
// all kept (keep: they stay where they were made), and the pool the saved tensors stored (fp8;
// kept ones of segments under another policy too). On top of that the arena's peak is the
// largest of:
//   a segment's forward, which makes its saved tensors in the arena before they are stored
//     (not under keep, where they stay);
//   dh, the head's gradient kept for the backward, and the head's logits chunk (last stage);
//   in the backward, backward_stack's buffers (dP, tmp, da_in; one gradient per Attention
//     Residuals block; dh on the last stage) and the largest scratch of any one layer's backward,
//     or under recompute the segment re-run there, if larger.
// In floats, with n = B·T tokens (the stream's n/tp under sequence parallelism; the parts take
// all n) and d = hidden_size, and under tp each part's heads and columns a tp rank's, the stream is
// the embedding nd (first stage), the final norm's output nd and rstd n (last stage), and per layer
// the halves' outputs 2nd (one nd at layer granularity, the other saved by the layer); each half
// saves its norm's input nd and rstd n (with Attention Residuals also the mixed input nd and its
// softmax weights n·(blocks so far + 1)) and its part's tensors:
//   gated attention (p = H·head_dim, p_kv = kv heads·head_dim): q o (g y) = 2np (+2np with the
//     gate), k v = 2n·p_kv, lse nH; backward the same without lse, plus 4np for the keys and
//     values repeated over grouped heads and their gradients, and 2n for rotary positions;
//   gated MLA (p = H·d_v): 2n·r_q + nH(d_n + d_r) + n(2r_kv + d_r) + nH·d_n + 2np (+2np with
//     the gate) + nH + 2n; backward 2np (+2np) + nH(d_n + d_r) + nH·d_n + 2n·d_r + 2n·r_q +
//     nH(d_n + d_v) + 3n·r_kv (+2n rotary positions); under ring attention the cache
//     n(r_kv + d_r) instead of k_n and v, and 4 blocks in its backward;
//   KDA (P = H·D): 11nP + 4nH + nD + its chunk records (kda::chunk_saved_floats; under KCP the
//     two spans' records, the pairs of all spans, the incoming states and the halos);
//     backward 9nP + nH + nD;
//   dense GLU of width W: 3nW; backward 3nW;
//   LatentMoE: LatentMoE::arena_use (its rows are S·K under MoonEP, plus the replica slots'
//     weights; under plain ep every rank's rows at most).
// Multi-token prediction modules count as decoder layers of the last chunk (their eh_proj input,
// norms and second head are not counted).
// Policies: keep holds every segment's tensors, fp8 the non-exact ones at 1.03 bytes a value and
// one segment decoded; recompute one segment re-run, offload two neighbours (the one restored
// and the next one fetched ahead). A budget holds what it allows, between recompute's and
// keep's. Each allocation rounds up to 64 bytes: 64 allocations per layer are counted for that.
double activation_bytes(const ModelConfig& whole, const ActivationLayout& l) {
  const ModelConfig c = tp_shard(whole, l.tp);
  std::vector<std::pair<int64_t, int64_t>> chunks = l.chunks;
  if (chunks.empty()) chunks.push_back({0, c.num_hidden_layers});
  double keep = 0, held = 0, least = 0;
  for (auto [first, end] : chunks) {
    const ChunkFloats f = chunk_floats(c, l, first, end);
    keep = std::max(keep, held_bytes(f, activation::Policy::Keep, l.in_flight));
    held = std::max(held, held_bytes(f, l.policy, l.in_flight));
    least = std::max(least, held_bytes(f, activation::Policy::Recompute, l.in_flight));
  }
  return l.budget > 0 ? std::min(keep, std::max(l.budget, least)) : held;
}

double activation_bytes(const ModelConfig& c, int64_t B, int64_t T) {
  ActivationLayout l;
  l.rows = B;
  l.tokens = T;
  return activation_bytes(c, l);
}

ModelMemory model_memory(const Model& model, const ActivationLayout& layout) {
  const ParamRegistry& p = model.params();
  const ModelConfig& c = model.config();
  const double flat_bytes = static_cast<double>(p.flat_size()) * sizeof(float);
  double moe_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    moe_layers += ffn_kind(c, l) == FfnKind::LatentMoE;
  // Per MoE layer the balancer's counts (int64): Quantile Balancing's histograms, or the loads.
  const double counts = static_cast<double>(balancer_counts(c)) * sizeof(int64_t);
  return {p.total_numel(), flat_bytes, flat_bytes, activation_bytes(c, layout),
          moe_layers * counts};
}

}  // namespace k3::model
