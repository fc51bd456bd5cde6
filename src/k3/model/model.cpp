#include "k3/model/model.h"

#include <algorithm>
#include <string>

#include "k3/base/error.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/embedding.h"
#include "k3/kernels/gemm.h"

namespace k3 {

Model::Model(ModelConfig c) : config_(std::move(c)) {
  const int64_t d = config_.hidden_size, V = config_.vocab_size;
  const float std = static_cast<float>(config_.initializer_range), eps = static_cast<float>(config_.rms_norm_eps);
  embed_ = params_.add("model.embed_tokens.weight", {V, d}, ParamInit::normal(std));
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    layers_.push_back(Layer{RMSNorm(params_, p + ".input_layernorm", d, eps),
                            RMSNorm(params_, p + ".post_attention_layernorm", d, eps),
                            GatedAttention(params_, p + ".self_attn", config_),
                            GluMlp(params_, p + ".mlp", config_, config_.intermediate_size)});
  }
  final_norm_ = RMSNorm(params_, "model.norm", d, eps);
  head_ = params_.add("lm_head.weight", {V, d}, ParamInit::normal(std));
  params_.allocate();
}

int64_t Model::lm_head_chunk() const {
  // At most ~8M floats of logits at a time, and never fewer than 64 rows per GEMM.
  return std::clamp<int64_t>((int64_t{8} << 20) / config_.vocab_size, 64, 1024);
}

static void check_tokens(const int32_t* t, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    K3_CHECK(t[i] >= 0 && t[i] < vocab, what, "[", i, "] = ", t[i], " is outside the vocabulary of ", vocab);
}

float* Model::forward_hidden(const Step& s, const int32_t* tokens, int64_t B, int64_t T) {
  const int64_t n = B * T, d = config_.hidden_size;
  check_tokens(tokens, n, config_.vocab_size, "token");
  float* x = s.alloc(n * d);
  kernels::embedding_forward(tokens, n, s.params.value(embed_).f32(), config_.vocab_size, d, x);
  for (const Layer& L : layers_) {
    float *a_in = s.alloc(n * d), *a = s.alloc(n * d), *mid = s.alloc(n * d);
    L.input_norm.forward(s, x, n, a_in);
    L.attn.forward(s, a_in, B, T, a);
    kernels::add(x, a, mid, n * d);
    float *m_in = s.alloc(n * d), *f = s.alloc(n * d), *next = s.alloc(n * d);
    L.post_norm.forward(s, mid, n, m_in);
    L.mlp.forward(s, m_in, n, f);
    kernels::add(mid, f, next, n * d);
    x = next;
  }
  float* h = s.alloc(n * d);
  final_norm_.forward(s, x, n, h);
  return h;
}

kernels::LossSum Model::forward_backward(Arena& arena, ActivationManager& acts, const TokenBatch& b,
                                         float grad_scale) {
  ArenaScope scope(arena);
  Step s{arena, acts, params_, true};
  const int64_t n = b.B * b.T, d = config_.hidden_size;
  float* h = forward_hidden(s, b.tokens, b.B, b.T);
  float* dx = s.alloc(n * d);
  const int64_t chunk = lm_head_chunk();
  kernels::LmHeadCeArgs ce{h, params_.value(head_).f32(), b.targets, n, d, config_.vocab_size,
                           config_.ignore_index, grad_scale, chunk,
                           s.alloc(chunk * config_.vocab_size), dx, params_.grad(head_).f32()};
  kernels::LossSum loss = kernels::lm_head_cross_entropy(ce);

  // Backward through the stack: dx holds d(loss)/d(residual stream).
  float* dh = s.alloc(n * d);
  final_norm_.backward(s, dx, n, dh, false);
  std::swap(dx, dh);
  float* dbranch = s.alloc(n * d);
  for (auto L = layers_.rbegin(); L != layers_.rend(); ++L) {
    L->mlp.backward(s, dx, n, dbranch);
    L->post_norm.backward(s, dbranch, n, dx, true);  // dx now = d/d(mid)
    L->attn.backward(s, dx, b.B, b.T, dbranch);
    L->input_norm.backward(s, dbranch, n, dx, true);  // dx now = d/d(layer input)
  }
  kernels::embedding_backward(b.tokens, n, dx, config_.vocab_size, d, params_.grad(embed_).f32());
  acts.clear();
  return loss;
}

kernels::LossSum Model::forward_loss(Arena& arena, const TokenBatch& b) {
  ArenaScope scope(arena);
  ActivationManager unused;
  Step s{arena, unused, params_, false};
  const int64_t n = b.B * b.T, d = config_.hidden_size;
  float* h = forward_hidden(s, b.tokens, b.B, b.T);
  const int64_t chunk = lm_head_chunk();
  kernels::LmHeadCeArgs ce{h, params_.value(head_).f32(), b.targets, n, d, config_.vocab_size,
                           config_.ignore_index, 1.f, chunk, s.alloc(chunk * config_.vocab_size),
                           nullptr, nullptr};
  return kernels::lm_head_cross_entropy(ce);
}

void Model::forward_logits(Arena& arena, const int32_t* tokens, int64_t B, int64_t T, float* logits) {
  ArenaScope scope(arena);
  ActivationManager unused;
  Step s{arena, unused, params_, false};
  float* h = forward_hidden(s, tokens, B, T);
  kernels::gemm(false, true, B * T, config_.vocab_size, config_.hidden_size, 1.f, h,
                params_.value(head_).f32(), 0.f, logits);
}

KVCache Model::make_cache(int64_t max_len) const {
  KVCache c;
  c.max_len = max_len;
  for (size_t l = 0; l < layers_.size(); ++l) {
    c.k.push_back(Tensor::zeros({max_len, config_.attn_dim()}));
    c.v.push_back(Tensor::zeros({max_len, config_.attn_dim()}));
  }
  return c;
}

void Model::decode(Arena& arena, KVCache& cache, const int32_t* tokens, int64_t n, float* logits) {
  K3_CHECK(n > 0, "decode needs at least one token");
  K3_CHECK(cache.length + n <= cache.max_len, "generation exceeds the cache of ", cache.max_len,
           " tokens");
  check_tokens(tokens, n, config_.vocab_size, "token");
  ArenaScope scope(arena);
  ActivationManager unused;
  Step s{arena, unused, params_, false};
  const int64_t d = config_.hidden_size, p = config_.attn_dim(), pos = cache.length;
  float *x = s.alloc(n * d), *t = s.alloc(n * d), *a = s.alloc(n * d);
  kernels::embedding_forward(tokens, n, params_.value(embed_).f32(), config_.vocab_size, d, x);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    float *kc = cache.k[l].f32(), *vc = cache.v[l].f32();
    L.input_norm.forward(s, x, n, t);
    L.attn.project_kv(s, t, n, kc + pos * p, vc + pos * p);
    L.attn.decode(s, t, n, kc, vc, pos, a);
    kernels::add_inplace(x, a, n * d);
    L.post_norm.forward(s, x, n, t);
    L.mlp.forward(s, t, n, a);
    kernels::add_inplace(x, a, n * d);
  }
  cache.length += n;
  final_norm_.forward(s, x + (n - 1) * d, 1, t);
  kernels::gemm(false, true, 1, config_.vocab_size, d, 1.f, t, params_.value(head_).f32(), 0.f, logits);
}

size_t Model::step_arena_bytes(int64_t B, int64_t T) const {
  const int64_t n = B * T, d = config_.hidden_size, p = config_.attn_dim();
  const int64_t I = config_.intermediate_size, H = config_.num_attention_heads;
  // Per layer and token: 6 residual-width buffers, q k v g o y, lse, gate/up/h, two rstd.
  const int64_t per_layer = 6 * d + 6 * p + H + 3 * I + 2;
  // Outside the layers: embedding, final norm, the gradient ping-pong buffers.
  const int64_t outside = 5 * d + 1;
  // One layer's backward scratch at a time.
  const int64_t scratch = 6 * p + 3 * I + 2 * d;
  const int64_t floats = n * (config_.num_hidden_layers * per_layer + outside + scratch) +
                         lm_head_chunk() * config_.vocab_size;
  // 64-byte alignment of each allocation (~16 per layer) plus headroom.
  return static_cast<size_t>(floats) * sizeof(float) * 9 / 8 +
         static_cast<size_t>(config_.num_hidden_layers + 4) * 64 * 64 + (size_t{4} << 20);
}

int64_t Model::matmul_params() const {
  int64_t n = 0;
  for (int i = 0; i < params_.size(); ++i)
    if (params_.info(i).shape.size() == 2 && i != embed_) n += params_.info(i).numel();
  return n;
}

double Model::train_flops_per_token(int64_t T) const {
  const double attn = 12.0 * static_cast<double>(config_.num_hidden_layers) *
                      static_cast<double>(config_.attn_dim()) * static_cast<double>(T) / 2.0;
  return 6.0 * static_cast<double>(matmul_params()) + attn;
}

}  // namespace k3
