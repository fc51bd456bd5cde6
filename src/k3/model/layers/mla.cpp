#include "k3/model/layers/mla.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/gemm.h"
#include "k3/kernels/kda/sequences.h"
#include "k3/model/context/documents.h"
#include "k3/model/layers/tp_region.h"

namespace k3::model {
namespace {

// One row of packed documents (s.B = 1): each document's queries attend causally to its own keys,
// document by document. A document's lse is scratch of the step's arena, at most [H, T].
void attention_forward_documents(const Step& st, const kernels::AttentionShape& s,
                                 std::span<const int64_t> docs, const float* q, const float* k,
                                 const float* kr, const float* v, float* out, float* lse) {
  const int64_t H = s.H, dq = s.dqk + s.dr;
  ArenaScope scratch(st.arena);
  float* l = st.alloc(H * s.T);
  for (const DocumentRun& r : document_runs(docs, 0, s.T)) {
    kernels::AttentionShape d = s;
    d.T = r.end - r.begin;
    kernels::attention_forward(d, q + r.begin * H * dq, k + r.begin * H * s.dqk,
                               kr + r.begin * s.dr, v + r.begin * H * s.dv,
                               out + r.begin * H * s.dv, l);
    put_run_lse(lse, H, s.T, r, l);
  }
}
void attention_backward_documents(const Step& st, const kernels::AttentionShape& s,
                                  std::span<const int64_t> docs, const float* q, const float* k,
                                  const float* kr, const float* v, const float* out,
                                  const float* lse, const float* dout, float* dq, float* dk,
                                  float* dkr, float* dv) {
  const int64_t H = s.H, dqd = s.dqk + s.dr;
  ArenaScope scratch(st.arena);
  float* l = st.alloc(H * s.T);
  for (const DocumentRun& r : document_runs(docs, 0, s.T)) {
    kernels::AttentionShape d = s;
    d.T = r.end - r.begin;
    run_lse(lse, H, s.T, r, l);
    const int64_t qo = r.begin * H * dqd, ko = r.begin * H * s.dqk, kro = r.begin * s.dr,
                  vo = r.begin * H * s.dv;
    kernels::attention_backward(d, q + qo, k + ko, kr + kro, v + vo, out + vo, l, dout + vo,
                                dq + qo, dk + ko, dkr + kro, dv + vo);
  }
}

// src [rows, na + nb] -> a [rows, na], b [rows, nb].
void split_columns(const float* src, int64_t rows, int64_t na, int64_t nb, float* a, float* b) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * (na + nb);
    std::copy(row, row + na, a + r * na);
    std::copy(row + na, row + na + nb, b + r * nb);
  }
}

// a [rows, na], b [rows, nb] -> dst [rows, na + nb].
void join_columns(const float* a, const float* b, int64_t rows, int64_t na, int64_t nb,
                  float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = dst + r * (na + nb);
    std::copy(a + r * na, a + (r + 1) * na, row);
    std::copy(b + r * nb, b + (r + 1) * nb, row + na);
  }
}

// In place, over each row of x [rows, cols].
void softmax_rows(float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    const float mx = *std::max_element(row, row + cols);
    float sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += (row[j] = std::exp(row[j] - mx));
    for (int64_t j = 0; j < cols; ++j) row[j] /= sum;
  }
}

}  // namespace

GatedMLA::GatedMLA(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c)
    : prefix_(prefix),
      hidden_(c.hidden_size),
      heads_(c.num_attention_heads),
      d_n_(c.qk_nope_head_dim),
      d_r_(c.qk_rope_head_dim),
      d_v_(c.v_head_dim),
      r_kv_(c.kv_lora_rank),
      gated_(c.mla_use_output_gate) {
  for (auto [field, value] : {std::pair{"hidden_size", c.hidden_size},
                              {"num_attention_heads", c.num_attention_heads},
                              {"q_lora_rank", c.q_lora_rank},
                              {"kv_lora_rank", c.kv_lora_rank},
                              {"qk_nope_head_dim", c.qk_nope_head_dim},
                              {"qk_rope_head_dim", c.qk_rope_head_dim},
                              {"v_head_dim", c.v_head_dim}})
    K3_CHECK_CTX(value > 0, (ErrorContext{c.source, field, -1}),
                 "gated MLA needs a positive value, got ", value);
  const float std = static_cast<float>(c.initializer_range);
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Under tensor parallelism the heads are split over tp. The low-rank down-projections and their
  // norms are replicated: every rank computes the same latents (and the shared k_r), but feeds
  // them only to its own heads, so their gradients are partial sums (summed).
  q_a_ = Linear(reg, prefix + ".q_a_proj", hidden_, c.q_lora_rank, std, LinearMode::summed);
  q_norm_ =
      RMSNorm(reg, prefix + ".q_a_layernorm", c.q_lora_rank, eps, shard_of(LinearMode::summed));
  q_b_ = Linear(reg, prefix + ".q_b_proj", c.q_lora_rank, heads_ * (d_n_ + d_r_), std,
                LinearMode::column);
  kv_a_ =
      Linear(reg, prefix + ".kv_a_proj_with_mqa", hidden_, r_kv_ + d_r_, std, LinearMode::summed);
  kv_norm_ = RMSNorm(reg, prefix + ".kv_a_layernorm", r_kv_, eps, shard_of(LinearMode::summed));
  kv_b_ =
      Linear(reg, prefix + ".kv_b_proj", r_kv_, heads_ * (d_n_ + d_v_), std, LinearMode::column);
  if (gated_) g_ = Linear(reg, prefix + ".g_proj", hidden_, heads_ * d_v_, std, LinearMode::column);
  o_ =
      Linear(reg, prefix + ".o_proj", heads_ * d_v_, hidden_, c.output_init_std(), LinearMode::row);
  heads_ = o_.in() / d_v_;  // this rank's
  rope_ = Rotary(c, d_r_);
}

void GatedMLA::rotate(const int64_t* positions, int64_t n, float* q, float* k_r,
                      bool backward) const {
  const int64_t dqk = d_n_ + d_r_;
  for (auto [l, x] : {std::pair{kernels::RopeLayout{n, heads_, d_r_, heads_ * dqk, dqk}, q + d_n_},
                      {kernels::RopeLayout{n, 1, d_r_, d_r_, d_r_}, k_r}})
    backward ? rope_.backward(l, positions, x) : rope_.forward(l, positions, x);
}

void GatedMLA::forward(const Step& s, const float* x, const Sequences& seq, float* out) const {
  run(s, x, seq.B, seq.T, seq.doc_starts, nullptr, out);
}
void GatedMLA::backward(const Step& s, const float* dout, const Sequences& seq, float* dx) const {
  run_backward(s, dout, seq.B, seq.T, seq.doc_starts, dx);
}

void GatedMLA::run(const Step& s, const float* x, int64_t B, int64_t T,
                   std::span<const int64_t> doc_starts, MlaCache* cache, float* out) const {
  kernels::kda::check_doc_starts(B, s.grid.cp().size() * T, doc_starts, prefix_);
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, r_q = q_a_.out(), dqk = d_n_ + d_r_, p = heads_ * d_v_;
  // Queries [n, H, d_n + d_r]; kv_a_proj_with_mqa writes [c_kv | k_r] per token and kv_b_proj
  // [k_n | v] per head, split into contiguous parts for the attention kernel.
  float *q_lat = s.alloc(n * r_q), *q_lat_n = s.alloc(n * r_q), *q = s.alloc(n * heads_ * dqk);
  float *c_kv = s.alloc(n * r_kv_), *k_r = s.alloc(n * d_r_), *c_kv_n = s.alloc(n * r_kv_);
  // Under context parallelism the ring expands every block's keys and values itself.
  const dist::Comm& cp = s.grid.cp();
  const bool ring = cp.size() > 1;
  float* k_n = ring ? nullptr : s.alloc(n * heads_ * d_n_);
  float *v = ring ? nullptr : s.alloc(n * p), *g = gated_ ? s.alloc(n * p) : nullptr;
  float *o = s.alloc(n * p), *lse = s.alloc(B * heads_ * T), *y = gated_ ? s.alloc(n * p) : o;
  {
    // The gathered input and the interleaved outputs are scratch above what backward reads.
    ArenaScope scratch(s.arena);
    const float* xa = region.enter(x);
    q_a_.forward(s, xa, n, q_lat);
    float* c = s.alloc(n * (r_kv_ + d_r_));
    kv_a_.forward(s, xa, n, c);
    split_columns(c, n, r_kv_, d_r_, c_kv, k_r);
    if (gated_) g_.forward(s, xa, n, g);
  }
  q_norm_.forward(s, q_lat, n, q_lat_n);  // saves q_lat and its rstd
  q_b_.forward(s, q_lat_n, n, q);
  kv_norm_.forward(s, c_kv, n, c_kv_n);  // saves c_kv and its rstd
  if (rope_.on()) {
    ArenaScope scratch(s.arena);
    rotate(rope_.positions(s, {B, T, doc_starts}), n, q, k_r, false);
  }
  if (cache) {
    std::copy_n(c_kv_n, n * r_kv_, cache->c_kv.f32());
    std::copy_n(k_r, n * d_r_, cache->k_r.f32());
  }
  if (ring) {
    ArenaScope scratch(s.arena);
    float* latent = s.alloc(n * (r_kv_ + d_r_));
    join_columns(c_kv_n, k_r, n, r_kv_, d_r_, latent);
    ring_attention_forward(s.arena, cp, ring_shape(B, T, doc_starts, s.precision), q, latent,
                           expand_kv(s), o, lse);
  } else {
    {
      ArenaScope scratch(s.arena);
      float* kv = s.alloc(n * heads_ * (d_n_ + d_v_));
      kv_b_.forward(s, c_kv_n, n, kv);
      split_columns(kv, n * heads_, d_n_, d_v_, k_n, v);
    }
    kernels::AttentionShape shape{B, T, heads_, d_n_, d_r_, d_v_, 0.f};
    shape.precision = s.precision;
    if (doc_starts.empty())
      kernels::attention_forward(shape, q, k_n, k_r, v, o, lse);
    else
      attention_forward_documents(s, shape, doc_starts, q, k_n, k_r, v, o, lse);
  }
  if (gated_) kernels::sigmoid_gate_forward(o, g, y, n * p);
  {
    ArenaScope scratch(s.arena);
    float* partial = region.partial(out);
    o_.forward(s, y, n, partial);
    region.leave(partial, out);
  }
  // Without the gate, y is o and g absent: saved empty.
  for (auto [name, ptr, size] : {std::tuple{".x", x, region.rows() * hidden_},
                                 {".q_lat_n", q_lat_n, n * r_q},
                                 {".q", q, n * heads_ * dqk},
                                 {".c_kv_n", c_kv_n, n * r_kv_},
                                 {".k_n", k_n, ring ? 0 : n * heads_ * d_n_},
                                 {".k_r", k_r, n * d_r_},
                                 {".v", v, ring ? 0 : n * p},
                                 {".g", g, gated_ ? n * p : 0},
                                 {".o", o, n * p},
                                 {".y", y, gated_ ? n * p : 0}})
    s.save(prefix_ + name, ptr, size);
  s.save_exact(prefix_ + ".lse", lse, B * heads_ * T);  // a per-row statistic
}

// This rank's heads give partial gradients of everything they share (the latents, k_r, x); the
// region's end sums dx, the optimizer's reduction the replicated weights' gradients.
void GatedMLA::run_backward(const Step& s, const float* dout, int64_t B, int64_t T,
                            std::span<const int64_t> doc_starts, float* dx) const {
  ArenaScope scope(s.arena);
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, r_q = q_a_.out(), dqk = d_n_ + d_r_, p = heads_ * d_v_;
  auto load = [&](const char* name) { return s.load(prefix_ + name); };
  const float *q_lat_n = load(".q_lat_n"), *q = load(".q");
  const float *c_kv_n = load(".c_kv_n"), *k_n = load(".k_n"), *k_r = load(".k_r"), *v = load(".v");
  const float *o = load(".o"), *lse = load(".lse"), *y = gated_ ? load(".y") : o;

  float* dy = s.alloc(n * p);
  float *d_o = gated_ ? s.alloc(n * p) : dy, *dg = gated_ ? s.alloc(n * p) : nullptr;
  o_.backward(s, y, region.leave_backward(dout), n, dy, false);
  if (gated_) kernels::sigmoid_gate_backward(o, load(".g"), dy, d_o, dg, n * p);
  const dist::Comm& cp = s.grid.cp();
  const bool ring = cp.size() > 1;
  float *dq = s.alloc(n * heads_ * dqk), *dk_r = s.alloc(n * d_r_);
  float *dc_kv_n = s.alloc(n * r_kv_), *dc_kv = s.alloc(n * r_kv_);
  if (ring) {  // the ring gives the latents' gradient, kv_b_proj's included
    float *latent = s.alloc(n * (r_kv_ + d_r_)), *dlatent = s.alloc(n * (r_kv_ + d_r_));
    join_columns(c_kv_n, k_r, n, r_kv_, d_r_, latent);
    ring_attention_backward(s.arena, cp, ring_shape(B, T, doc_starts, s.precision), q, latent, o,
                            lse, d_o, expand_kv(s), expand_kv_backward(s), dq, dlatent);
    split_columns(dlatent, n, r_kv_, d_r_, dc_kv_n, dk_r);
  } else {
    float *dk_n = s.alloc(n * heads_ * d_n_), *dv = s.alloc(n * p);
    kernels::AttentionShape shape{B, T, heads_, d_n_, d_r_, d_v_, 0.f};
    shape.precision = s.precision;
    if (doc_starts.empty())
      kernels::attention_backward(shape, q, k_n, k_r, v, o, lse, d_o, dq, dk_n, dk_r, dv);
    else
      attention_backward_documents(s, shape, doc_starts, q, k_n, k_r, v, o, lse, d_o, dq, dk_n,
                                   dk_r, dv);
    // Back to the projection's interleaved layout.
    float* dkv = s.alloc(n * heads_ * (d_n_ + d_v_));
    join_columns(dk_n, dv, n * heads_, d_n_, d_v_, dkv);
    kv_b_.backward(s, c_kv_n, dkv, n, dc_kv_n, false);
  }
  if (rope_.on()) {  // the gradients of q_r and k_r before their rotation
    ArenaScope scratch(s.arena);
    rotate(rope_.positions(s, {B, T, doc_starts}), n, dq, dk_r, true);
  }

  const float* xa = region.enter(load(".x"));
  float* partial = region.partial(dx);
  float *dq_lat_n = s.alloc(n * r_q), *dq_lat = s.alloc(n * r_q);
  q_b_.backward(s, q_lat_n, dq, n, dq_lat_n, false);
  q_norm_.backward(s, dq_lat_n, n, dq_lat, false);
  q_a_.backward(s, xa, dq_lat, n, partial, false);

  float* dc = s.alloc(n * (r_kv_ + d_r_));
  kv_norm_.backward(s, dc_kv_n, n, dc_kv, false);
  join_columns(dc_kv, dk_r, n, r_kv_, d_r_, dc);
  kv_a_.backward(s, xa, dc, n, partial, true);
  if (gated_) g_.backward(s, xa, dg, n, partial, true);
  region.enter_backward(partial, dx);
}

RingShape GatedMLA::ring_shape(int64_t B, int64_t T, std::span<const int64_t> doc_starts,
                               kernels::Precision precision) const {
  K3_CHECK(T % 2 == 0, prefix_, ": ring attention splits each rank's ", T,
           " tokens into two chunks; use an even number");
  return {B, T / 2, heads_, d_n_, d_r_, d_v_, r_kv_, doc_starts, precision};
}

ExpandKv GatedMLA::expand_kv(const Step& s) const {
  return [this, &s](const float* c, int64_t rows, float* k_n, float* v) {
    ArenaScope scratch(s.arena);
    float* kv = s.alloc(rows * heads_ * (d_n_ + d_v_));
    kv_b_.forward(s, c, rows, kv);
    split_columns(kv, rows * heads_, d_n_, d_v_, k_n, v);
  };
}

ExpandKvBackward GatedMLA::expand_kv_backward(const Step& s) const {
  return [this, &s](const float* c, const float* dk_n, const float* dv, int64_t rows, float* dc) {
    ArenaScope scratch(s.arena);
    float* dkv = s.alloc(rows * heads_ * (d_n_ + d_v_));
    join_columns(dk_n, dv, rows * heads_, d_n_, d_v_, dkv);
    kv_b_.backward(s, c, dkv, rows, dc, true);
  };
}

std::unique_ptr<DecodeCache> GatedMLA::make_cache(int64_t max_len) const {
  K3_CHECK(max_len >= 0, prefix_, ": cache length must not be negative, got ", max_len);
  auto cache = std::make_unique<MlaCache>();
  cache->max_len = max_len;
  cache->c_kv = Tensor::zeros({max_len, r_kv_});
  cache->k_r = Tensor::zeros({max_len, d_r_});
  return cache;
}

static MlaCache& mla_cache(DecodeCache* c, const std::string& prefix) {
  auto* latent = dynamic_cast<MlaCache*>(c);
  K3_CHECK(latent, prefix, ": decode needs the cache from this layer's make_cache");
  return *latent;
}

void GatedMLA::decode(const Step& s, const float* x, int64_t rows, DecodeCache& base,
                      float* out) const {
  MlaCache& cache = mla_cache(&base, prefix_);
  K3_CHECK(rows >= 0 && cache.length + rows <= cache.max_len, prefix_, ": decoding ", rows,
           " tokens at position ", cache.length, " overflows the cache of ", cache.max_len);
  if (cache.length == 0 && rows > 1 && s.grid.cp().size() == 1) {  // a prefill: full attention
    ArenaScope scope(s.arena);
    run(s.inference(), x, 1, rows, {}, &cache, out);
  } else {
    std::vector<DecodeCache*> caches(static_cast<size_t>(rows), &cache);
    std::vector<int64_t> positions(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) positions[static_cast<size_t>(r)] = cache.length + r;
    decode_rows(s, x, caches, positions, out);
  }
  cache.length += rows;
}

void GatedMLA::decode_batch(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                            float* out) const {
  std::vector<int64_t> positions;
  for (DecodeCache* c : caches) {
    MlaCache& cache = mla_cache(c, prefix_);
    K3_CHECK(cache.length < cache.max_len, prefix_, ": decoding at position ", cache.length,
             " overflows the cache of ", cache.max_len);
    positions.push_back(cache.length);
  }
  decode_rows(s, x, caches, positions, out);
  for (DecodeCache* c : caches) c->length += 1;
}

// Weight absorption: with W_kb,h [d_n, r_kv] and W_vb,h [d_v, r_kv] the rows of kv_b_proj that
// make head h's k_n and v, q_n·k_n,t = (W_kb,hᵀ q_n)·c_t and Σ_t α_t v_t = W_vb,h Σ_t α_t c_t,
// where c_t is the cached normalized latent. So per-head keys and values are never formed, and each
// query reads the cache once for all heads: O(ctx · H · (r_kv + d_r)) per token.
void GatedMLA::decode_rows(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                           std::span<const int64_t> positions, float* out) const {
  ArenaScope scope(s.arena);
  const Step infer = s.inference();  // decode saves nothing for backward
  const int64_t rows = static_cast<int64_t>(positions.size()), r_q = q_a_.out(), dqk = d_n_ + d_r_,
                p = heads_ * d_v_;
  auto cache_of = [&](int64_t r) -> MlaCache& {
    return static_cast<MlaCache&>(*caches[static_cast<size_t>(r)]);
  };

  // Append the new tokens first: each one attends to itself.
  float *c = s.alloc(rows * (r_kv_ + d_r_)), *c_kv = s.alloc(rows * r_kv_),
        *k_r = s.alloc(rows * d_r_), *c_kv_n = s.alloc(rows * r_kv_);
  kv_a_.forward(infer, x, rows, c);
  split_columns(c, rows, r_kv_, d_r_, c_kv, k_r);
  kv_norm_.forward(infer, c_kv, rows, c_kv_n);
  float* q = s.alloc(rows * heads_ * dqk);
  {
    ArenaScope scratch(s.arena);
    float *q_lat = s.alloc(rows * r_q), *q_lat_n = s.alloc(rows * r_q);
    q_a_.forward(infer, x, rows, q_lat);
    q_norm_.forward(infer, q_lat, rows, q_lat_n);
    q_b_.forward(infer, q_lat_n, rows, q);
  }
  rotate(positions.data(), rows, q, k_r, false);
  int64_t max_ctx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = positions[static_cast<size_t>(r)];
    std::copy_n(c_kv_n + r * r_kv_, r_kv_, cache_of(r).c_kv.f32() + at * r_kv_);
    std::copy_n(k_r + r * d_r_, d_r_, cache_of(r).k_r.f32() + at * d_r_);
    max_ctx = std::max(max_ctx, at + 1);
  }

  // Per head: qc [rows, H, r_kv] = q_n W_kb,h. The absorbed products are the weights' products,
  // in the step's precision; those over the cache (their length grows every token) stay fp32.
  const float* w_kvb = s.params.value(kv_b_.weight()).f32();  // [H, d_n + d_v, r_kv]
  const uint16_t* w_kvb_bf16 = s.weight_bf16(kv_b_.weight());
  const int64_t head_rows = (d_n_ + d_v_) * r_kv_;
  float* qc = s.alloc(rows * heads_ * r_kv_);
  kernels::gemm_batched({false, false, rows, r_kv_, d_n_, 1.f, q, heads_ * dqk, w_kvb, r_kv_, 0.f,
                         qc, heads_ * r_kv_, s.precision, nullptr, w_kvb_bf16},
                        heads_, dqk, head_rows, r_kv_);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  float *scores = s.alloc(heads_ * max_ctx), *ctx_lat = s.alloc(rows * heads_ * r_kv_);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ctx = positions[static_cast<size_t>(r)] + 1;
    const float *ckv = cache_of(r).c_kv.f32(), *kr = cache_of(r).k_r.f32();
    // scores [H, ctx] = scale (qc·c_t + q_r·k_r,t), then the weighted latent [H, r_kv].
    kernels::gemm({false, true, heads_, ctx, r_kv_, scale, qc + r * heads_ * r_kv_, r_kv_, ckv,
                   r_kv_, 0.f, scores, ctx});
    kernels::gemm({false, true, heads_, ctx, d_r_, scale, q + r * heads_ * dqk + d_n_, dqk, kr,
                   d_r_, 1.f, scores, ctx});
    softmax_rows(scores, heads_, ctx);
    kernels::gemm({false, false, heads_, r_kv_, ctx, 1.f, scores, ctx, ckv, r_kv_, 0.f,
                   ctx_lat + r * heads_ * r_kv_, r_kv_});
  }
  // Per head: o [rows, H, d_v] = ctx_lat W_vb,hᵀ.
  float *o = s.alloc(rows * p), *g = gated_ ? s.alloc(rows * p) : nullptr;
  kernels::gemm_batched({false, true, rows, d_v_, r_kv_, 1.f, ctx_lat, heads_ * r_kv_,
                         w_kvb + d_n_ * r_kv_, r_kv_, 0.f, o, p, s.precision, nullptr,
                         w_kvb_bf16 ? w_kvb_bf16 + d_n_ * r_kv_ : nullptr},
                        heads_, r_kv_, head_rows, d_v_);
  if (gated_) {
    g_.forward(infer, x, rows, g);
    kernels::sigmoid_gate_forward(o, g, o, rows * p);
  }
  o_.forward(infer, o, rows, out);
  TpRegion(infer, rows, hidden_).leave(out, out);
}

}  // namespace k3::model
