#include "k3/model/layers/gated_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "k3/base/error.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/elementwise.h"
#include "k3/model/layers/tp_region.h"

namespace k3::model {

GatedAttention::GatedAttention(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c)
    : prefix_(prefix),
      heads_(c.num_attention_heads),
      kv_heads_(c.kv_heads()),
      head_dim_(c.head_dim),
      hidden_(c.hidden_size),
      gated_(c.mla_use_output_gate),
      rope_(c, c.head_dim) {
  const float std = static_cast<float>(c.initializer_range);
  const int64_t p = c.attn_dim();
  // Split by heads over tp: q, k, v and g column-parallel, o row-parallel.
  q_ = Linear(reg, prefix + ".q_proj", hidden_, p, std, LinearMode::column);
  k_ = Linear(reg, prefix + ".k_proj", hidden_, c.kv_dim(), std, LinearMode::column);
  v_ = Linear(reg, prefix + ".v_proj", hidden_, c.kv_dim(), std, LinearMode::column);
  if (gated_) g_ = Linear(reg, prefix + ".g_proj", hidden_, p, std, LinearMode::column);
  o_ = Linear(reg, prefix + ".o_proj", p, hidden_, c.output_init_std(), LinearMode::row);
  heads_ = q_.out() / head_dim_;  // this rank's
  kv_heads_ = k_.out() / head_dim_;
}

namespace {
struct KVCache final : DecodeCache {
  int64_t max_len;
  Tensor k, v;  // [max_len, kv_heads * head_dim]
};

void refuse_documents(const Sequences& seq) {
  if (seq.doc_starts.empty()) return;
  throw Error(
      "packed documents are taken by KDA and gated MLA layers only; this model has a gated "
      "attention layer",
      ErrorContext{"", "data.documents", -1});
}

KVCache& kv_cache(DecodeCache* c, const std::string& prefix) {
  auto* kv = dynamic_cast<KVCache*>(c);
  K3_CHECK(kv, prefix, ": decode needs the cache from this layer's make_cache");
  return *kv;
}

// Grouped-query attention runs the attention kernel on keys and values repeated for every query
// head: [n, kv, d] -> [n, kv·g, d], key-value head j serving query heads j·g .. j·g + g − 1.
void expand_heads(const float* src, int64_t n, int64_t kv, int64_t g, int64_t d, float* dst) {
#pragma omp parallel if (n * kv * g * d > (1 << 16))
#pragma omp for schedule(static)
  for (int64_t t = 0; t < n * kv; ++t)
    for (int64_t r = 0; r < g; ++r) std::copy_n(src + t * d, d, dst + (t * g + r) * d);
}
// Its gradient: each key-value head's is the sum of its group's, in head order.
void sum_heads(const float* src, int64_t n, int64_t kv, int64_t g, int64_t d, float* dst) {
#pragma omp parallel if (n * kv * g * d > (1 << 16))
#pragma omp for schedule(static)
  for (int64_t t = 0; t < n * kv; ++t) {
    float* sum = dst + t * d;
    std::copy_n(src + t * g * d, d, sum);
    for (int64_t r = 1; r < g; ++r)
      for (int64_t i = 0; i < d; ++i) sum[i] += src[(t * g + r) * d + i];
  }
}
}  // namespace

void GatedAttention::forward(const Step& s, const float* x, const Sequences& seq,
                             float* out) const {
  refuse_documents(seq);
  run(s, x, seq.B, seq.T, nullptr, out);
}

void GatedAttention::run(const Step& s, const float* x, int64_t B, int64_t T, DecodeCache* cache,
                         float* out) const {
  // Each cp rank would attend within its own chunks only: refused rather than wrong.
  K3_CHECK(s.grid.cp().size() == 1, "the plain gated attention has no context-parallel algorithm "
           "(cp = ", s.grid.cp().size(), "): KDA and gated MLA layers have");
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, p = heads_ * head_dim_, pk = kv_heads_ * head_dim_;
  float *q = s.alloc(n * p), *k = s.alloc(n * pk), *v = s.alloc(n * pk);
  float* g = gated_ ? s.alloc(n * p) : nullptr;
  float *o = s.alloc(n * p), *lse = s.alloc(B * heads_ * T);
  float* y = gated_ ? s.alloc(n * p) : o;
  {
    ArenaScope scratch(s.arena);
    const float* xa = region.enter(x);
    q_.forward(s, xa, n, q);
    k_.forward(s, xa, n, k);
    v_.forward(s, xa, n, v);
    if (gated_) g_.forward(s, xa, n, g);
    if (rope_.on()) {
      const int64_t* pos = rope_.positions(s, {B, T});
      rope_.forward(heads_layout(n, heads_), pos, q);
      rope_.forward(heads_layout(n, kv_heads_), pos, k);
    }
  }
  if (cache) {
    KVCache& kv = kv_cache(cache, prefix_);
    std::copy_n(k, n * pk, kv.k.f32());
    std::copy_n(v, n * pk, kv.v.f32());
  }
  kernels::AttentionShape shape{B, T, heads_, head_dim_, 0, head_dim_, 0.f};
  shape.precision = s.precision;
  {
    ArenaScope scratch(s.arena);
    const float *keys = k, *values = v;
    if (group() > 1) {
      float* kv = s.alloc(2 * n * p);
      expand_heads(k, n, kv_heads_, group(), head_dim_, kv);
      expand_heads(v, n, kv_heads_, group(), head_dim_, kv + n * p);
      keys = kv, values = kv + n * p;
    }
    kernels::attention_forward(shape, q, keys, nullptr, values, o, lse);
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
                                 {".q", q, n * p},
                                 {".k", k, n * pk},
                                 {".v", v, n * pk},
                                 {".g", g, gated_ ? n * p : 0},
                                 {".o", o, n * p},
                                 {".y", y, gated_ ? n * p : 0}})
    s.save(prefix_ + name, ptr, size);
  s.save_exact(prefix_ + ".lse", lse, B * heads_ * T);  // a per-row statistic
}

void GatedAttention::backward(const Step& s, const float* dout, const Sequences& seq,
                              float* dx) const {
  refuse_documents(seq);
  const int64_t B = seq.B, T = seq.T;
  ArenaScope scope(s.arena);
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, p = heads_ * head_dim_, pk = kv_heads_ * head_dim_;
  const float *q = s.load(prefix_ + ".q"), *k = s.load(prefix_ + ".k");
  const float *v = s.load(prefix_ + ".v"), *o = s.load(prefix_ + ".o");
  const float *lse = s.load(prefix_ + ".lse"), *y = gated_ ? s.load(prefix_ + ".y") : o;
  float* dy = s.alloc(n * p);
  o_.backward(s, y, region.leave_backward(dout), n, dy, false);
  float *d_o = dy, *dg = nullptr;
  if (gated_) {
    d_o = s.alloc(n * p), dg = s.alloc(n * p);
    kernels::sigmoid_gate_backward(o, s.load(prefix_ + ".g"), dy, d_o, dg, n * p);
  }
  float *dq = s.alloc(n * p), *dk = s.alloc(n * pk), *dv = s.alloc(n * pk);
  kernels::AttentionShape shape{B, T, heads_, head_dim_, 0, head_dim_, 0.f};
  shape.precision = s.precision;
  if (group() > 1) {
    ArenaScope scratch(s.arena);
    float *kv = s.alloc(2 * n * p), *dkv = s.alloc(2 * n * p);
    expand_heads(k, n, kv_heads_, group(), head_dim_, kv);
    expand_heads(v, n, kv_heads_, group(), head_dim_, kv + n * p);
    kernels::attention_backward(shape, q, kv, nullptr, kv + n * p, o, lse, d_o, dq, dkv, nullptr,
                                dkv + n * p);
    sum_heads(dkv, n, kv_heads_, group(), head_dim_, dk);
    sum_heads(dkv + n * p, n, kv_heads_, group(), head_dim_, dv);
  } else {
    kernels::attention_backward(shape, q, k, nullptr, v, o, lse, d_o, dq, dk, nullptr, dv);
  }
  if (rope_.on()) {  // the gradients of q and k before their rotation
    ArenaScope scratch(s.arena);
    const int64_t* pos = rope_.positions(s, {B, T});
    rope_.backward(heads_layout(n, heads_), pos, dq);
    rope_.backward(heads_layout(n, kv_heads_), pos, dk);
  }
  const float* xa = region.enter(s.load(prefix_ + ".x"));
  float* partial = region.partial(dx);
  q_.backward(s, xa, dq, n, partial, false);
  k_.backward(s, xa, dk, n, partial, true);
  v_.backward(s, xa, dv, n, partial, true);
  if (gated_) g_.backward(s, xa, dg, n, partial, true);
  region.enter_backward(partial, dx);
}

std::unique_ptr<DecodeCache> GatedAttention::make_cache(int64_t max_len) const {
  auto c = std::make_unique<KVCache>();
  c->max_len = max_len;
  c->k = Tensor::zeros({max_len, kv_heads_ * head_dim_});
  c->v = Tensor::zeros({max_len, kv_heads_ * head_dim_});
  return c;
}

void GatedAttention::decode(const Step& s, const float* x, int64_t rows, DecodeCache& base,
                            float* out) const {
  KVCache& cache = kv_cache(&base, prefix_);
  K3_CHECK(rows > 0 && cache.length + rows <= cache.max_len, prefix_, ": decoding ", rows,
           " tokens at position ", cache.length, " overflows the cache of ", cache.max_len);
  if (cache.length == 0 && rows > 1 && s.grid.cp().size() == 1) {  // a prefill
    run(s.inference(), x, 1, rows, &cache, out);
  } else {
    std::vector<DecodeCache*> caches(static_cast<size_t>(rows), &cache);
    std::vector<int64_t> positions(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) positions[static_cast<size_t>(r)] = cache.length + r;
    decode_rows(s, x, caches, positions, out);
  }
  cache.length += rows;
}

void GatedAttention::decode_batch(const Step& s, const float* x,
                                  std::span<DecodeCache* const> caches, float* out) const {
  std::vector<int64_t> positions;
  for (DecodeCache* c : caches) {
    KVCache& cache = kv_cache(c, prefix_);
    K3_CHECK(cache.length < cache.max_len, prefix_, ": decoding at position ", cache.length,
             " overflows the cache of ", cache.max_len);
    positions.push_back(cache.length);
  }
  decode_rows(s, x, caches, positions, out);
  for (DecodeCache* c : caches) c->length += 1;
}

void GatedAttention::decode_rows(const Step& s, const float* x,
                                 std::span<DecodeCache* const> caches,
                                 std::span<const int64_t> positions, float* out) const {
  ArenaScope scope(s.arena);
  const Step infer = s.inference();
  const int64_t rows = static_cast<int64_t>(positions.size()), p = heads_ * head_dim_,
                pk = kv_heads_ * head_dim_;
  float *q = s.alloc(rows * p), *k = s.alloc(rows * pk), *v = s.alloc(rows * pk),
        *g = gated_ ? s.alloc(rows * p) : nullptr, *o = s.alloc(rows * p);
  q_.forward(infer, x, rows, q);
  k_.forward(infer, x, rows, k);
  v_.forward(infer, x, rows, v);
  if (gated_) g_.forward(infer, x, rows, g);
  rope_.forward(heads_layout(rows, heads_), positions.data(), q);
  rope_.forward(heads_layout(rows, kv_heads_), positions.data(), k);
  int64_t max_ctx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    KVCache& c = kv_cache(caches[static_cast<size_t>(r)], prefix_);
    const int64_t at = positions[static_cast<size_t>(r)];
    std::copy_n(k + r * pk, pk, c.k.f32() + at * pk);
    std::copy_n(v + r * pk, pk, c.v.f32() + at * pk);
    max_ctx = std::max(max_ctx, at + 1);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  float* weights = s.alloc(rows * heads_ * max_ctx);  // each (row, head)'s attention weights
#pragma omp parallel for collapse(2) schedule(static) if (rows * heads_ * max_ctx > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads_; ++h) {
      const auto& c = static_cast<const KVCache&>(*caches[static_cast<size_t>(r)]);
      // Query head h reads the keys and values of its group's head.
      const float *k_cache = c.k.f32() + h / group() * head_dim_,
                  *v_cache = c.v.f32() + h / group() * head_dim_;
      const int64_t ctx = positions[static_cast<size_t>(r)] + 1;
      const float* qh = q + r * p + h * head_dim_;
      float* w = weights + (r * heads_ + h) * max_ctx;
      float mx = -INFINITY;
      for (int64_t t = 0; t < ctx; ++t) {
        const float* kt = k_cache + t * pk;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < head_dim_; ++i) dot += qh[i] * kt[i];
        w[t] = dot * scale;
        mx = std::max(mx, w[t]);
      }
      float sum = 0;
      for (int64_t t = 0; t < ctx; ++t) sum += (w[t] = std::exp(w[t] - mx));
      float* oh = o + r * p + h * head_dim_;
      for (int64_t i = 0; i < head_dim_; ++i) oh[i] = 0;
      for (int64_t t = 0; t < ctx; ++t) {
        const float* vt = v_cache + t * pk;
        const float a = w[t] / sum;
#pragma omp simd
        for (int64_t i = 0; i < head_dim_; ++i) oh[i] += a * vt[i];
      }
    }
  if (gated_) kernels::sigmoid_gate_forward(o, g, o, rows * p);
  o_.forward(infer, o, rows, out);
  TpRegion(infer, rows, hidden_).leave(out, out);
}

}  // namespace k3::model
