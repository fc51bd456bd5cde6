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
      head_dim_(c.head_dim),
      hidden_(c.hidden_size) {
  const float std = static_cast<float>(c.initializer_range);
  const int64_t p = c.attn_dim();
  // Split by heads over tp: q, k, v and g column-parallel, o row-parallel.
  q_ = Linear(reg, prefix + ".q_proj", hidden_, p, std, LinearMode::column);
  k_ = Linear(reg, prefix + ".k_proj", hidden_, p, std, LinearMode::column);
  v_ = Linear(reg, prefix + ".v_proj", hidden_, p, std, LinearMode::column);
  g_ = Linear(reg, prefix + ".g_proj", hidden_, p, std, LinearMode::column);
  o_ = Linear(reg, prefix + ".o_proj", p, hidden_, c.output_init_std(), LinearMode::row);
  heads_ = q_.out() / head_dim_;  // this rank's
}

namespace {
struct KVCache final : DecodeCache {
  int64_t max_len;
  Tensor k, v;  // [max_len, heads * head_dim]
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
  const int64_t n = B * T, p = heads_ * head_dim_;
  float *q = s.alloc(n * p), *k = s.alloc(n * p), *v = s.alloc(n * p), *g = s.alloc(n * p);
  float *o = s.alloc(n * p), *lse = s.alloc(B * heads_ * T), *y = s.alloc(n * p);
  {
    ArenaScope scratch(s.arena);
    const float* xa = region.enter(x);
    q_.forward(s, xa, n, q);
    k_.forward(s, xa, n, k);
    v_.forward(s, xa, n, v);
    g_.forward(s, xa, n, g);
  }
  if (cache) {
    KVCache& kv = kv_cache(cache, prefix_);
    std::copy_n(k, n * p, kv.k.f32());
    std::copy_n(v, n * p, kv.v.f32());
  }
  kernels::AttentionShape shape{B, T, heads_, head_dim_, 0, head_dim_, 0.f};
  shape.precision = s.precision;
  kernels::attention_forward(shape, q, k, nullptr, v, o, lse);
  kernels::sigmoid_gate_forward(o, g, y, n * p);
  {
    ArenaScope scratch(s.arena);
    float* partial = region.partial(out);
    o_.forward(s, y, n, partial);
    region.leave(partial, out);
  }
  for (auto [name, ptr, size] : {std::tuple{".x", x, region.rows() * hidden_},
                                 {".q", q, n * p},
                                 {".k", k, n * p},
                                 {".v", v, n * p},
                                 {".g", g, n * p},
                                 {".o", o, n * p},
                                 {".y", y, n * p}})
    s.save(prefix_ + name, ptr, size);
  s.save_exact(prefix_ + ".lse", lse, B * heads_ * T);  // a per-row statistic
}

void GatedAttention::backward(const Step& s, const float* dout, const Sequences& seq,
                              float* dx) const {
  refuse_documents(seq);
  const int64_t B = seq.B, T = seq.T;
  ArenaScope scope(s.arena);
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, p = heads_ * head_dim_;
  const float *q = s.load(prefix_ + ".q"), *k = s.load(prefix_ + ".k");
  const float *v = s.load(prefix_ + ".v"), *g = s.load(prefix_ + ".g"), *o = s.load(prefix_ + ".o");
  const float *lse = s.load(prefix_ + ".lse"), *y = s.load(prefix_ + ".y");
  float *dy = s.alloc(n * p), *d_o = s.alloc(n * p), *dg = s.alloc(n * p);
  o_.backward(s, y, region.leave_backward(dout), n, dy, false);
  kernels::sigmoid_gate_backward(o, g, dy, d_o, dg, n * p);
  float *dq = s.alloc(n * p), *dk = s.alloc(n * p), *dv = s.alloc(n * p);
  kernels::AttentionShape shape{B, T, heads_, head_dim_, 0, head_dim_, 0.f};
  shape.precision = s.precision;
  kernels::attention_backward(shape, q, k, nullptr, v, o, lse, d_o, dq, dk, nullptr, dv);
  const float* xa = region.enter(s.load(prefix_ + ".x"));
  float* partial = region.partial(dx);
  q_.backward(s, xa, dq, n, partial, false);
  k_.backward(s, xa, dk, n, partial, true);
  v_.backward(s, xa, dv, n, partial, true);
  g_.backward(s, xa, dg, n, partial, true);
  region.enter_backward(partial, dx);
}

std::unique_ptr<DecodeCache> GatedAttention::make_cache(int64_t max_len) const {
  auto c = std::make_unique<KVCache>();
  c->max_len = max_len;
  c->k = Tensor::zeros({max_len, heads_ * head_dim_});
  c->v = Tensor::zeros({max_len, heads_ * head_dim_});
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
  const int64_t rows = static_cast<int64_t>(positions.size()), p = heads_ * head_dim_;
  float *q = s.alloc(rows * p), *k = s.alloc(rows * p), *v = s.alloc(rows * p),
        *g = s.alloc(rows * p), *o = s.alloc(rows * p);
  q_.forward(infer, x, rows, q);
  k_.forward(infer, x, rows, k);
  v_.forward(infer, x, rows, v);
  g_.forward(infer, x, rows, g);
  int64_t max_ctx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    KVCache& c = kv_cache(caches[static_cast<size_t>(r)], prefix_);
    const int64_t at = positions[static_cast<size_t>(r)];
    std::copy_n(k + r * p, p, c.k.f32() + at * p);
    std::copy_n(v + r * p, p, c.v.f32() + at * p);
    max_ctx = std::max(max_ctx, at + 1);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  float* weights = s.alloc(rows * heads_ * max_ctx);  // each (row, head)'s attention weights
#pragma omp parallel for collapse(2) schedule(static) if (rows * heads_ * max_ctx > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads_; ++h) {
      const auto& c = static_cast<const KVCache&>(*caches[static_cast<size_t>(r)]);
      const float *k_cache = c.k.f32(), *v_cache = c.v.f32();
      const int64_t ctx = positions[static_cast<size_t>(r)] + 1;
      const float* qh = q + r * p + h * head_dim_;
      float* w = weights + (r * heads_ + h) * max_ctx;
      float mx = -INFINITY;
      for (int64_t t = 0; t < ctx; ++t) {
        const float* kt = k_cache + t * p + h * head_dim_;
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
        const float* vt = v_cache + t * p + h * head_dim_;
        const float a = w[t] / sum;
#pragma omp simd
        for (int64_t i = 0; i < head_dim_; ++i) oh[i] += a * vt[i];
      }
    }
  kernels::sigmoid_gate_forward(o, g, o, rows * p);
  o_.forward(infer, o, rows, out);
  TpRegion(infer, rows, hidden_).leave(out, out);
}

}  // namespace k3::model
