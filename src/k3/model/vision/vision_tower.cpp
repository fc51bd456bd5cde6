#include "k3/model/vision/vision_tower.h"

#include <cstring>

#include "k3/base/arena.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/full_attention.h"
#include "k3/kernels/gemm.h"

namespace k3::model {
namespace {

// The 2×2 merge as row moves: merged token (image, bi, bj) is patches (2bi, 2bj), (2bi, 2bj+1),
// (2bi+1, 2bj), (2bi+1, 2bj+1) side by side. `to_merged` false moves them back.
void merge_2x2(float* patches, float* merged, int64_t n, int64_t g, int64_t d, bool to_merged) {
  const int64_t h = g / 2;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t bi = 0; bi < h; ++bi)
      for (int64_t bj = 0; bj < h; ++bj)
        for (int64_t q = 0; q < 4; ++q) {
          float* p = patches + (img * g * g + (2 * bi + q / 2) * g + 2 * bj + q % 2) * d;
          float* m = merged + ((img * h + bi) * h + bj) * 4 * d + q * d;
          std::memcpy(to_merged ? m : p, to_merged ? p : m, static_cast<size_t>(d) * sizeof(float));
        }
}

// [rows, 3Q] rows of [q | k | v] to three [rows, Q] tensors, or back (`split` false).
void split_qkv(float* qkv, float* q, float* k, float* v, int64_t rows, int64_t Q, bool split) {
  float* parts[3] = {q, k, v};
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < 3; ++j) {
      float* packed = qkv + (r * 3 + j) * Q;
      float* part = parts[j] + r * Q;
      std::memcpy(split ? part : packed, split ? packed : part,
                  static_cast<size_t>(Q) * sizeof(float));
    }
}

// Each image's patches attend to each other, both ways.
kernels::AttentionShape attention_shape(const Step& s, int64_t n, int64_t tokens, int64_t heads,
                                        int64_t qkv) {
  kernels::AttentionShape a{
      .B = n, .T = tokens, .H = heads, .dqk = qkv / heads, .dr = 0, .dv = qkv / heads};
  a.causal = false;
  a.precision = s.precision;
  return a;
}

}  // namespace

VisionTower::VisionTower(ParamRegistry& reg, const ModelConfig& c)
    : size_(c.vt_image_size),
      patch_(c.vt_patch_size),
      grid_(c.vision_grid()),
      dim_(c.vt_hidden_size),
      heads_(c.vt_num_attention_heads),
      qkv_(c.vt_qkv_hidden_size),
      hidden_(c.hidden_size) {
  const float std = static_cast<float>(c.initializer_range), out_std = c.output_init_std(),
              eps = static_cast<float>(c.rms_norm_eps);
  const int64_t D = dim_, I = c.vt_intermediate_size;
  patch_w_ = reg.add("vision_tower.patch_embed.proj.weight", {D, 3, patch_, patch_},
                     ParamInit::normal(std));
  pos_w_ =
      reg.add("vision_tower.patch_embed.pos_emb.weight", {grid_, grid_, D}, ParamInit::normal(std));
  for (int64_t b = 0; b < c.vt_num_hidden_layers; ++b) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(b);
    blocks_.push_back(
        {p, RMSNorm(reg, p + ".norm0", D, eps), RMSNorm(reg, p + ".norm1", D, eps),
         Linear(reg, p + ".wqkv", D, 3 * qkv_, std), Linear(reg, p + ".wo", qkv_, D, out_std),
         Linear(reg, p + ".mlp.fc0", D, I, std), Linear(reg, p + ".mlp.fc1", I, D, out_std)});
  }
  final_norm_ = RMSNorm(reg, "vision_tower.encoder.final_layernorm", D, eps);
  proj0_ = Linear(reg, "mm_projector.proj.0", 4 * D, 4 * D, std);
  proj2_ = Linear(reg, "mm_projector.proj.2", 4 * D, hidden_, std);
  post_norm_ =
      RMSNorm(reg, "mm_projector.post_norm", hidden_, static_cast<float>(c.vt_projector_ln_eps));
  params_end_ = reg.size();
}

void VisionTower::patches(const float* images, int64_t n, float* out) const {
  const int64_t p = patch_;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t i = 0; i < grid_; ++i)
      for (int64_t j = 0; j < grid_; ++j) {
        float* row = out + ((img * grid_ + i) * grid_ + j) * 3 * p * p;
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t y = 0; y < p; ++y)
            std::memcpy(row + (ch * p + y) * p,
                        images + ((img * 3 + ch) * size_ + i * p + y) * size_ + j * p,
                        static_cast<size_t>(p) * sizeof(float));
      }
}

void VisionTower::block_forward(const Step& s, const Block& b, const float* x, int64_t n,
                                float* y) const {
  const int64_t R = n * grid_ * grid_, D = dim_, Q = qkv_, I = b.fc0.out();
  float *a = s.alloc(R * D), *q = s.alloc(R * Q), *k = s.alloc(R * Q), *v = s.alloc(R * Q);
  const kernels::AttentionShape shape = attention_shape(s, n, grid_ * grid_, heads_, Q);
  float *o = s.alloc(R * Q), *p = s.alloc(n * heads_ * shape.T * shape.T);
  float *mid = s.alloc(R * D), *c = s.alloc(R * D), *f = s.alloc(R * I);
  b.norm0.forward(s, x, R, a);
  {
    ArenaScope scratch(s.arena);
    float* qkv = s.alloc(R * 3 * Q);
    b.wqkv.forward(s, a, R, qkv);
    split_qkv(qkv, q, k, v, R, Q, true);
  }
  kernels::full_attention_forward(shape, q, k, v, o, p);
  b.wo.forward(s, o, R, mid);
  kernels::add_inplace(mid, x, R * D);
  b.norm1.forward(s, mid, R, c);
  b.fc0.forward(s, c, R, f);
  {
    ArenaScope scratch(s.arena);
    float* g = s.alloc(R * I);
    kernels::gelu_forward(f, g, R * I, true);
    b.fc1.forward(s, g, R, y);
  }
  kernels::add_inplace(y, mid, R * D);
  for (auto [what, ptr, floats] : {std::tuple{".a", a, R * D},
                                   {".q", q, R * Q},
                                   {".k", k, R * Q},
                                   {".v", v, R * Q},
                                   {".o", o, R * Q},
                                   {".p", p, n * heads_ * shape.T * shape.T},
                                   {".c", c, R * D},
                                   {".f", f, R * I}})
    s.save(b.name + what, ptr, floats);
}

void VisionTower::block_backward(const Step& s, const Block& b, int64_t n, const float* dy,
                                 float* dx) const {
  const int64_t R = n * grid_ * grid_, D = dim_, Q = qkv_, I = b.fc0.out();
  const kernels::AttentionShape shape = attention_shape(s, n, grid_ * grid_, heads_, Q);
  auto load = [&](const char* what) { return s.load(b.name + what); };
  ArenaScope scratch(s.arena);
  float *g = s.alloc(R * I), *dg = s.alloc(R * I), *dc = s.alloc(R * D), *dmid = s.alloc(R * D);
  // y = mid + fc1(gelu(fc0(norm1(mid))))
  kernels::gelu_forward(load(".f"), g, R * I, true);
  b.fc1.backward(s, g, dy, R, dg, false);
  kernels::gelu_backward(load(".f"), dg, dg, R * I, true);
  b.fc0.backward(s, load(".c"), dg, R, dc, false);
  std::memcpy(dmid, dy, static_cast<size_t>(R * D) * sizeof(float));
  b.norm1.backward(s, dc, R, dmid, true);
  // mid = x + wo(attention(split(wqkv(norm0(x)))))
  float *d_o = s.alloc(R * Q), *dq = s.alloc(R * Q), *dk = s.alloc(R * Q), *dv = s.alloc(R * Q);
  float *dqkv = s.alloc(R * 3 * Q), *da = s.alloc(R * D);
  float* att = s.alloc(kernels::full_attention_scratch(shape));
  b.wo.backward(s, load(".o"), dmid, R, d_o, false);
  kernels::full_attention_backward(shape, load(".q"), load(".k"), load(".v"), load(".p"), d_o, dq,
                                   dk, dv, att);
  split_qkv(dqkv, dq, dk, dv, R, Q, false);
  b.wqkv.backward(s, load(".a"), dqkv, R, da, false);
  std::memcpy(dx, dmid, static_cast<size_t>(R * D) * sizeof(float));
  b.norm0.backward(s, da, R, dx, true);
}

void VisionTower::forward(const Step& s, const float* images, int64_t n, float* out) const {
  const int64_t R = n * grid_ * grid_, D = dim_, N = grid_ * grid_, M = n * tokens_per_image();
  float* x = s.alloc(R * D);
  {
    ArenaScope scratch(s.arena);
    float* rows = s.alloc(R * 3 * patch_ * patch_);
    patches(images, n, rows);
    kernels::gemm(false, true, R, D, 3 * patch_ * patch_, 1.f, rows, s.params.value(patch_w_).f32(),
                  0.f, x);
  }
  const float* pos = s.params.value(pos_w_).f32();
  for (int64_t img = 0; img < n; ++img) kernels::add_inplace(x + img * N * D, pos, N * D);
  for (const Block& b : blocks_) {
    float* y = s.alloc(R * D);
    block_forward(s, b, x, n, y);
    x = y;
  }
  float *normed = s.alloc(R * D), *merged = s.alloc(M * 4 * D), *h0 = s.alloc(M * 4 * D);
  final_norm_.forward(s, x, R, normed);
  merge_2x2(normed, merged, n, grid_, D, true);
  proj0_.forward(s, merged, M, h0);
  float* h2 = s.alloc(M * hidden_);
  {
    ArenaScope scratch(s.arena);
    float* h1 = s.alloc(M * 4 * D);
    kernels::gelu_forward(h0, h1, M * 4 * D, false);
    proj2_.forward(s, h1, M, h2);
  }
  post_norm_.forward(s, h2, M, out);
  s.save("vision_tower.merged", merged, M * 4 * D);
  s.save("mm_projector.h0", h0, M * 4 * D);
}

void VisionTower::backward(const Step& s, const float* images, int64_t n,
                           const float* d_out) const {
  const int64_t R = n * grid_ * grid_, D = dim_, N = grid_ * grid_, M = n * tokens_per_image();
  ArenaScope scratch(s.arena);
  const float* h0 = s.load("mm_projector.h0");
  float *dh2 = s.alloc(M * hidden_), *h1 = s.alloc(M * 4 * D), *dh = s.alloc(M * 4 * D);
  float *dmerged = s.alloc(M * 4 * D), *dnormed = s.alloc(R * D);
  post_norm_.backward(s, d_out, M, dh2, false);
  kernels::gelu_forward(h0, h1, M * 4 * D, false);
  proj2_.backward(s, h1, dh2, M, dh, false);
  kernels::gelu_backward(h0, dh, dh, M * 4 * D, false);
  proj0_.backward(s, s.load("vision_tower.merged"), dh, M, dmerged, false);
  merge_2x2(dnormed, dmerged, n, grid_, D, false);
  float *dx = s.alloc(R * D), *dprev = s.alloc(R * D);
  final_norm_.backward(s, dnormed, R, dx, false);
  for (auto b = blocks_.rbegin(); b != blocks_.rend(); ++b) {
    block_backward(s, *b, n, dx, dprev);
    std::swap(dx, dprev);
  }
  float* dpos = s.params.grad(pos_w_).f32();
  for (int64_t img = 0; img < n; ++img) kernels::add_inplace(dpos, dx + img * N * D, N * D);
  float* rows = s.alloc(R * 3 * patch_ * patch_);
  patches(images, n, rows);
  s.weight_grad(dx, rows, R, D, 3 * patch_ * patch_, s.params.grad(patch_w_).f32());
}

}  // namespace k3::model
