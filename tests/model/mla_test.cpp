#include "k3/model/layers/mla.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/naive_attention.h"
#include "common/test_util.h"
#include "k3/base/arena.h"
#include "k3/base/error.h"

namespace k3::model::mla_test {
namespace {

using namespace testing::naive;

const std::string kPrefix = "model.layers.0.self_attn";

// K3's gated NoPE MLA, or with deepseek DeepSeek-V3's: rotary embeddings on q_r and k_r, no gate.
ModelConfig small_config(bool deepseek = false) {
  ModelConfig c;
  c.mla_use_nope = c.mla_use_output_gate = !deepseek;
  c.hidden_size = 48;
  c.num_attention_heads = 3;
  c.q_lora_rank = 24;
  c.kv_lora_rank = 16;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 6;
  c.num_hidden_layers = 2;
  c.num_key_value_heads = c.num_attention_heads;
  return c;
}

std::vector<std::string> params_of(const ModelConfig& c) {
  std::vector<std::string> p = {"q_a_proj",       "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                                "kv_a_layernorm", "kv_b_proj",     "o_proj"};
  if (c.mla_use_output_gate) p.push_back("g_proj");
  return p;
}

// The layer, its parameters and a step. Parameters are redrawn larger than the initializer's so
// that the attention is far from uniform and the norms' weights far from one.
struct Harness {
  explicit Harness(bool deepseek = false) : cfg(small_config(deepseek)) { init(); }
  ModelConfig cfg;
  Arena arena{size_t{64} << 20, false};
  activation::ActivationManager acts;
  ParamRegistry reg;
  GatedMLA layer{reg, kPrefix, cfg};
  Step step{arena, acts, reg, true};

  void init() {
    reg.allocate();
    for (int i = 0; i < reg.size(); ++i) {
      const bool norm = reg.info(i).shape.size() == 1;
      auto v = testing::random_vec(static_cast<size_t>(reg.info(i).numel()), 100 + i,
                                   norm ? 0.5 : -0.5, norm ? 1.5 : 0.5);
      std::copy(v.begin(), v.end(), reg.value(i).f32());
    }
  }
  int index(const std::string& name) const { return reg.find(kPrefix + "." + name + ".weight"); }
};

// ---- The math §4 layer in double precision, one token and one head at a time. ----

Weights weights_of(const Harness& h) {
  return testing::naive::weights_of(h.reg, kPrefix, params_of(h.cfg));
}

std::vector<double> naive_mla(const ModelConfig& c, const Weights& W, const std::vector<double>& x,
                              size_t B, size_t T) {
  const size_t d = static_cast<size_t>(c.hidden_size),
               H = static_cast<size_t>(c.num_attention_heads);
  const size_t rq = static_cast<size_t>(c.q_lora_rank), rkv = static_cast<size_t>(c.kv_lora_rank);
  const size_t dn = static_cast<size_t>(c.qk_nope_head_dim),
               dr = static_cast<size_t>(c.qk_rope_head_dim);
  const size_t dv = static_cast<size_t>(c.v_head_dim), n = B * T;
  std::vector<std::vector<double>> q(n), kv(n), kr(n), gate(n);
  for (size_t i = 0; i < n; ++i) {
    const double* xi = &x[i * d];
    auto q_lat =
        rms_norm(matvec(W.at("q_a_proj"), xi, rq, d), W.at("q_a_layernorm"), c.rms_norm_eps);
    q[i] = matvec(W.at("q_b_proj"), q_lat.data(), H * (dn + dr), rq);
    auto ckr = matvec(W.at("kv_a_proj_with_mqa"), xi, rkv + dr, d);
    auto c_kv = rms_norm({ckr.begin(), ckr.begin() + static_cast<long>(rkv)},
                         W.at("kv_a_layernorm"), c.rms_norm_eps);
    kr[i].assign(ckr.begin() + static_cast<long>(rkv), ckr.end());
    kv[i] = matvec(W.at("kv_b_proj"), c_kv.data(), H * (dn + dv), rkv);
    if (c.mla_use_output_gate) gate[i] = matvec(W.at("g_proj"), xi, H * dv, d);
    if (c.rope()) {
      // Positions restart with each row.
      for (size_t h = 0; h < H; ++h) rotate(&q[i][h * (dn + dr) + dn], dr, c.rope_theta, i % T);
      rotate(kr[i].data(), dr, c.rope_theta, i % T);
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(dn + dr));
  std::vector<double> out(n * d);
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t) {
      const size_t i = b * T + t;
      std::vector<double> y;
      for (size_t h = 0; h < H; ++h) {
        const double* qh = &q[i][h * (dn + dr)];
        const std::vector<double> yh = attend(
            t, dv,
            [&](size_t s) {
              const double* kh = &kv[b * T + s][h * (dn + dv)];
              double dot = 0;
              for (size_t j = 0; j < dn; ++j) dot += qh[j] * kh[j];
              for (size_t j = 0; j < dr; ++j) dot += qh[dn + j] * kr[b * T + s][j];
              return dot * scale;
            },
            [&](size_t s) { return &kv[b * T + s][h * (dn + dv) + dn]; });
        y.insert(y.end(), yh.begin(), yh.end());
      }
      if (c.mla_use_output_gate)
        for (size_t j = 0; j < H * dv; ++j) y[j] *= sigmoid(gate[i][j]);
      auto o = matvec(W.at("o_proj"), y.data(), d, H * dv);
      std::copy(o.begin(), o.end(), out.begin() + static_cast<long>(i * d));
    }
  return out;
}

std::vector<float> random_input(size_t n, uint64_t seed) { return testing::random_vec(n, seed); }

TEST(GatedMLA, NamesShapesAndInitFollowTheK3Inventory) {
  ModelConfig c = small_config();
  ParamRegistry reg;
  GatedMLA layer(reg, kPrefix, c);
  reg.allocate();
  reg.initialize(3);
  // H = 3, d = 48, r_q = 24, r_kv = 16, d_n = 8, d_r = 4, d_v = 6.
  const std::map<std::string, Shape> want = {
      {"q_a_proj", {24, 48}},          {"q_a_layernorm", {24}},
      {"q_b_proj", {3 * (8 + 4), 24}}, {"kv_a_proj_with_mqa", {16 + 4, 48}},
      {"kv_a_layernorm", {16}},        {"kv_b_proj", {3 * (8 + 6), 16}},
      {"g_proj", {3 * 6, 48}},         {"o_proj", {48, 3 * 6}}};
  ASSERT_EQ(reg.size(), static_cast<int>(want.size()));
  for (const auto& [name, shape] : want) {
    const int i = reg.find(kPrefix + "." + name + ".weight");
    ASSERT_GE(i, 0) << name;
    EXPECT_EQ(reg.info(i).shape, shape) << name;
    Tensor t = reg.value(i);
    double sq = 0;
    for (int64_t j = 0; j < t.numel(); ++j) sq += double(t.f32()[j]) * t.f32()[j];
    const double rms = std::sqrt(sq / static_cast<double>(t.numel()));
    if (shape.size() == 1)
      EXPECT_EQ(rms, 1.0) << name;  // norms start at one
    else                            // N(0, 0.02²); o_proj scaled by 1/sqrt(2 · num_hidden_layers)
      EXPECT_NEAR(rms, name == "o_proj" ? 0.01 : 0.02, 0.003) << name;
  }
}

TEST(GatedMLA, RejectsNonPositiveFieldsByName) {
  const std::map<std::string, int64_t ModelConfig::*> fields = {
      {"q_lora_rank", &ModelConfig::q_lora_rank},
      {"kv_lora_rank", &ModelConfig::kv_lora_rank},
      {"qk_nope_head_dim", &ModelConfig::qk_nope_head_dim},
      {"qk_rope_head_dim", &ModelConfig::qk_rope_head_dim},
      {"v_head_dim", &ModelConfig::v_head_dim},
      {"num_attention_heads", &ModelConfig::num_attention_heads}};
  for (const auto& [field, member] : fields) {
    ModelConfig c = small_config();
    c.*member = 0;
    ParamRegistry reg;
    try {
      GatedMLA layer(reg, kPrefix, c);
      ADD_FAILURE() << field << " = 0 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("field " + field), std::string::npos) << e.what();
    }
  }
}

// DeepSeek-V3's MLA: no g_proj.
TEST(GatedMLA, WithoutTheGateHasNoGateProjection) {
  Harness h(/*deepseek=*/true);
  EXPECT_LT(h.index("g_proj"), 0);
  EXPECT_EQ(h.reg.size(), 7);
}

// Each test runs K3's gated NoPE MLA and DeepSeek-V3's (rotary embeddings, no gate).
class Mla : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(GatedMLA, Mla, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "DeepSeekV3" : "K3";
                         });

// T = 130 crosses the attention kernel's 128-query block.
TEST_P(Mla, ForwardMatchesNaiveDouble) {
  Harness h(GetParam());
  const int64_t B = 2, T = 130, d = h.cfg.hidden_size;
  auto x = random_input(static_cast<size_t>(B * T * d), 1);
  std::vector<float> out(x.size());
  h.layer.forward(h.step, x.data(), {B, T}, out.data());
  auto want = naive_mla(h.cfg, weights_of(h), testing::cast_vec<double>(x), B, T);
  K3_EXPECT_CLOSE(out, want, 1e-5, 1e-4);
}

// For x and each parameter: the layer's gradient along random directions equals the central
// difference of the double naive layer's loss sum(out ⊙ dout) along them.
TEST_P(Mla, BackwardMatchesFiniteDifferencesOfNaive) {
  Harness h(GetParam());
  const int64_t B = 2, T = 6, d = h.cfg.hidden_size;
  auto x = random_input(static_cast<size_t>(B * T * d), 2);
  auto dout = testing::random_vec<double>(x.size(), 3);
  std::vector<float> out(x.size()), dx(x.size());
  h.layer.forward(h.step, x.data(), {B, T}, out.data());
  h.layer.backward(h.step, testing::cast_vec<float>(dout).data(), {B, T}, dx.data());

  const Weights base = weights_of(h);
  const std::vector<double> x0 = testing::cast_vec<double>(x);
  auto loss = [&](const std::string& tensor, const std::vector<double>& u, double eps) {
    Weights w = base;
    std::vector<double> xs = x0;
    std::vector<double>& target = tensor == "x" ? xs : w.at(tensor);
    for (size_t i = 0; i < u.size(); ++i) target[i] += eps * u[i];
    return testing::dot(naive_mla(h.cfg, w, xs, B, T), dout);
  };
  std::vector<std::string> tensors = params_of(h.cfg);
  tensors.push_back("x");
  uint64_t seed = 10;
  for (const auto& tensor : tensors) {
    const Tensor g = tensor == "x" ? Tensor::view(dx.data(), {static_cast<int64_t>(dx.size())})
                                   : h.reg.grad(h.index(tensor));
    const std::vector<float> grad(g.f32(), g.f32() + g.numel());
    for (int dir = 0; dir < 2; ++dir) {
      auto u = testing::random_vec<double>(grad.size(), seed++);
      const double analytic = testing::dot(grad, u);
      const double numeric = (loss(tensor, u, 1e-5) - loss(tensor, u, -1e-5)) / 2e-5;
      EXPECT_NEAR(analytic, numeric, 1e-3 * std::abs(numeric) + 1e-4)
          << tensor << " direction " << dir;
    }
  }
}

// Documents packed in one row (starts inside the kernel's 128-query blocks and on one) equal
// separate runs: outputs, input gradients and the summed parameter gradients. A token that saw
// an earlier document's keys moves its output by their share of its attention. (With rotary
// embeddings a score depends on the two positions' difference only, so where a document's
// positions start changes nothing but rounding.)
TEST_P(Mla, PackedDocumentsEqualSeparateRuns) {
  Harness h(GetParam());
  const int64_t T = 300, d = h.cfg.hidden_size;
  const std::vector<int64_t> starts = {0, 7, 128, 129, 250};
  const auto x = random_input(static_cast<size_t>(T * d), 4),
             R = random_input(static_cast<size_t>(T * d), 5);
  const size_t np = h.reg.flat_size();
  std::vector<float> out(x.size()), dx(x.size()), sep_out(x.size()), sep_dx(x.size());
  // Forward and backward of <out, R> on one row of packed documents or B rows of T.
  const auto forward_backward = [&](const float* in, const float* r, float* o, float* g,
                                    const Sequences& seq) {
    ArenaScope scope(h.arena);
    h.layer.forward(h.step, in, seq, o);
    h.layer.backward(h.step, r, seq, g);
    h.acts.clear();
  };
  h.reg.zero_grads();
  forward_backward(x.data(), R.data(), out.data(), dx.data(), {1, T, starts});
  const std::vector<float> packed(h.reg.grads(), h.reg.grads() + np);
  h.reg.zero_grads();
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t b = starts[i], len = (i + 1 < starts.size() ? starts[i + 1] : T) - b;
    forward_backward(x.data() + b * d, R.data() + b * d, sep_out.data() + b * d,
                     sep_dx.data() + b * d, {1, len});
  }
  const std::vector<float> separate(h.reg.grads(), h.reg.grads() + np);
  // fp32 products of other shapes in the packed row than in the separate runs: measured up to
  // 1.4e-6 on outputs and 3e-6 on input gradients of up to 12 (AVX-512 and AVX2 oneDNN kernels).
  K3_EXPECT_CLOSE(out, sep_out, 3e-6, 1e-5);
  K3_EXPECT_CLOSE(dx, sep_dx, 6e-6, 1e-5);
  K3_EXPECT_CLOSE(packed, separate, 1e-5, 1e-4);
  EXPECT_THROW(
      h.layer.forward(h.step, x.data(), {1, T, std::vector<int64_t>{0, 50, 40}}, out.data()),
      Error);
}

// Each sequence decoded token by token, and as a prefill then single tokens, gives the rows of
// the full forward (with rotary embeddings, each at its own position).
TEST_P(Mla, DecodeMatchesFullForward) {
  Harness h(GetParam());
  const int64_t B = 2, T = 9, d = h.cfg.hidden_size;
  auto x = random_input(static_cast<size_t>(B * T * d), 4);
  std::vector<float> full(x.size());
  h.layer.forward(h.step, x.data(), {B, T}, full.data());
  const size_t saved = h.acts.count();
  for (int64_t prefill : {1, 4}) {
    for (int64_t b = 0; b < B; ++b) {
      std::unique_ptr<DecodeCache> owned = h.layer.make_cache(T);
      DecodeCache& cache = *owned;
      for (int64_t t = 0; t < T;) {
        const int64_t rows = t == 0 ? prefill : 1;
        std::vector<float> out(static_cast<size_t>(rows * d));
        h.layer.decode(h.step, x.data() + (b * T + t) * d, rows, cache, out.data());
        std::vector<float> want(full.begin() + (b * T + t) * d,
                                full.begin() + (b * T + t + rows) * d);
        K3_EXPECT_CLOSE(out, want, 1e-5, 1e-4)
            << "prefill " << prefill << ", b " << b << ", t " << t;
        t += rows;
        EXPECT_EQ(cache.length, t);
      }
      std::vector<float> extra(static_cast<size_t>(d));
      EXPECT_THROW(h.layer.decode(h.step, x.data(), 1, cache, extra.data()), Error);
      EXPECT_EQ(cache.length, T);
    }
  }
  EXPECT_EQ(h.acts.count(), saved);  // decoding saves nothing for backward
  struct OtherCache : DecodeCache {
  } other;
  std::vector<float> out(static_cast<size_t>(d));
  EXPECT_THROW(h.layer.decode(h.step, x.data(), 1, other, out.data()), Error);
}

// r_kv + d_r floats per token: the normalized kv latent and the shared key part.
TEST(GatedMLA, CacheHoldsOnlyTheLatentAndSharedKey) {
  Harness h;
  const int64_t len = 5, d = h.cfg.hidden_size, r_kv = h.cfg.kv_lora_rank,
                d_r = h.cfg.qk_rope_head_dim;
  std::unique_ptr<DecodeCache> owned = h.layer.make_cache(len);
  auto& cache = dynamic_cast<MlaCache&>(*owned);
  EXPECT_EQ(cache.c_kv.shape(), (Shape{len, r_kv}));
  EXPECT_EQ(cache.k_r.shape(), (Shape{len, d_r}));
  EXPECT_EQ(cache.c_kv.numel() + cache.k_r.numel(), len * (r_kv + d_r));

  auto x = random_input(static_cast<size_t>(len * d), 5);
  std::vector<float> out(x.size());
  h.layer.decode(h.step, x.data(), len, cache, out.data());
  const Weights w = weights_of(h);
  for (int64_t t = 0; t < len; ++t) {
    auto xt =
        testing::cast_vec<double>(std::vector<float>(x.begin() + t * d, x.begin() + (t + 1) * d));
    auto c = matvec(w.at("kv_a_proj_with_mqa"), xt.data(), static_cast<size_t>(r_kv + d_r),
                    static_cast<size_t>(d));
    auto c_kv = rms_norm({c.begin(), c.begin() + r_kv}, w.at("kv_a_layernorm"), h.cfg.rms_norm_eps);
    const float* row = cache.c_kv.f32() + t * r_kv;
    K3_EXPECT_CLOSE(std::vector<float>(row, row + r_kv), c_kv, 1e-5, 1e-4);
    const float* kr = cache.k_r.f32() + t * d_r;
    K3_EXPECT_CLOSE(std::vector<float>(kr, kr + d_r),
                    std::vector<double>(c.begin() + r_kv, c.end()), 1e-5, 1e-4);
  }
}

}  // namespace
}  // namespace k3::model::mla_test
