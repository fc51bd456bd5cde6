// The plain attention layer (layers/gated_attention.h) against the math in double: K3's form
// (every head its own keys and values, a sigmoid output gate, NoPE) and Llama's (grouped-query
// attention, rotary embeddings, no gate). Forward, the backward against central differences of the
// double layer, and decoding against the full forward.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/naive_attention.h"
#include "common/test_util.h"
#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/model/layers/gated_attention.h"

namespace k3::model::attention_test {
namespace {

using namespace testing::naive;

const std::string kPrefix = "model.layers.0.self_attn";

// d = 32, 4 heads of 8; Llama's: 2 key-value heads, θ = 100 (every pair turns visibly by T = 9).
ModelConfig small_config(bool llama) {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_key_value_heads = llama ? 2 : 4;
  c.head_dim = 8;
  c.num_hidden_layers = 2;
  c.mla_use_nope = c.mla_use_output_gate = !llama;
  c.rope_theta = 100;
  return c;
}

std::vector<std::string> params_of(const ModelConfig& c) {
  std::vector<std::string> p = {"q_proj", "k_proj", "v_proj", "o_proj"};
  if (c.mla_use_output_gate) p.push_back("g_proj");
  return p;
}

// The layer with weights drawn larger than the initializer's: attention far from uniform.
struct Harness {
  explicit Harness(bool llama) : cfg(small_config(llama)) {
    reg.allocate();
    for (int i = 0; i < reg.size(); ++i) {
      auto v = testing::random_vec(static_cast<size_t>(reg.info(i).numel()), 200 + i, -0.5, 0.5);
      std::copy(v.begin(), v.end(), reg.value(i).f32());
    }
  }
  ModelConfig cfg;
  Arena arena{size_t{64} << 20, false};
  activation::ActivationManager acts;
  ParamRegistry reg;
  GatedAttention layer{reg, kPrefix, cfg};
  Step step{arena, acts, reg, true};
  int index(const std::string& name) const { return reg.find(kPrefix + "." + name + ".weight"); }
};

Weights weights_of(const Harness& h) {
  return testing::naive::weights_of(h.reg, kPrefix, params_of(h.cfg));
}

// Query head h attends with key-value head h / (H / kv heads); positions restart with each row.
std::vector<double> naive_attention(const ModelConfig& c, const Weights& W,
                                    const std::vector<double>& x, size_t B, size_t T) {
  const size_t d = static_cast<size_t>(c.hidden_size),
               H = static_cast<size_t>(c.num_attention_heads),
               kv = static_cast<size_t>(c.num_key_value_heads),
               hd = static_cast<size_t>(c.head_dim), n = B * T;
  std::vector<std::vector<double>> q(n), k(n), v(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    q[i] = matvec(W.at("q_proj"), &x[i * d], H * hd, d);
    k[i] = matvec(W.at("k_proj"), &x[i * d], kv * hd, d);
    v[i] = matvec(W.at("v_proj"), &x[i * d], kv * hd, d);
    if (c.mla_use_output_gate) g[i] = matvec(W.at("g_proj"), &x[i * d], H * hd, d);
    if (c.rope()) {
      for (size_t h = 0; h < H; ++h) rotate(&q[i][h * hd], hd, c.rope_theta, i % T);
      for (size_t h = 0; h < kv; ++h) rotate(&k[i][h * hd], hd, c.rope_theta, i % T);
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i / T, t = i % T;
    std::vector<double> y;
    for (size_t h = 0; h < H; ++h) {
      const size_t j = h / (H / kv);
      const std::vector<double> yh = attend(
          t, hd,
          [&](size_t s) {
            double dot = 0;
            for (size_t e = 0; e < hd; ++e) dot += q[i][h * hd + e] * k[b * T + s][j * hd + e];
            return dot * scale;
          },
          [&](size_t s) { return &v[b * T + s][j * hd]; });
      y.insert(y.end(), yh.begin(), yh.end());
    }
    if (c.mla_use_output_gate)
      for (size_t e = 0; e < H * hd; ++e) y[e] *= sigmoid(g[i][e]);
    const std::vector<double> o = matvec(W.at("o_proj"), y.data(), d, H * hd);
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

class Attention : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(GatedAttention, Attention, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Llama" : "K3";
                         });

TEST(GatedAttention, GroupedHeadsHaveNarrowerKeysAndValuesAndNoGate) {
  Harness h(/*llama=*/true);
  EXPECT_EQ(h.reg.info(h.index("q_proj")).shape, (Shape{32, 32}));
  EXPECT_EQ(h.reg.info(h.index("k_proj")).shape, (Shape{16, 32}));  // 2 heads of 8
  EXPECT_EQ(h.reg.info(h.index("v_proj")).shape, (Shape{16, 32}));
  EXPECT_LT(h.index("g_proj"), 0);
}

// T = 130 crosses the attention kernel's 128-query block.
TEST_P(Attention, ForwardMatchesNaiveDouble) {
  Harness h(GetParam());
  const int64_t B = 2, T = 130, d = h.cfg.hidden_size;
  const auto x = testing::random_vec(static_cast<size_t>(B * T * d), 1);
  std::vector<float> out(x.size());
  h.layer.forward(h.step, x.data(), {B, T}, out.data());
  K3_EXPECT_CLOSE(out, naive_attention(h.cfg, weights_of(h), testing::cast_vec<double>(x), B, T),
                  1e-5, 1e-4);
}

// For x and each weight: the layer's gradient along random directions against the central
// difference of the double layer's loss sum(out ⊙ dout).
TEST_P(Attention, BackwardMatchesFiniteDifferencesOfNaive) {
  Harness h(GetParam());
  const int64_t B = 2, T = 7, d = h.cfg.hidden_size;
  const auto x = testing::random_vec(static_cast<size_t>(B * T * d), 2);
  const auto dout = testing::random_vec<double>(x.size(), 3);
  std::vector<float> out(x.size()), dx(x.size());
  h.layer.forward(h.step, x.data(), {B, T}, out.data());
  h.layer.backward(h.step, testing::cast_vec<float>(dout).data(), {B, T}, dx.data());
  const Weights base = weights_of(h);
  auto loss = [&](const std::string& tensor, const std::vector<double>& u, double eps) {
    Weights w = base;
    std::vector<double> xs = testing::cast_vec<double>(x);
    std::vector<double>& target = tensor == "x" ? xs : w.at(tensor);
    for (size_t i = 0; i < u.size(); ++i) target[i] += eps * u[i];
    return testing::dot(naive_attention(h.cfg, w, xs, B, T), dout);
  };
  std::vector<std::string> tensors = params_of(h.cfg);
  tensors.push_back("x");
  uint64_t seed = 10;
  for (const auto& tensor : tensors) {
    const Tensor g = tensor == "x" ? Tensor::view(dx.data(), {static_cast<int64_t>(dx.size())})
                                   : h.reg.grad(h.index(tensor));
    const std::vector<float> grad(g.f32(), g.f32() + g.numel());
    for (int dir = 0; dir < 2; ++dir) {
      const auto u = testing::random_vec<double>(grad.size(), seed++);
      const double numeric = (loss(tensor, u, 1e-5) - loss(tensor, u, -1e-5)) / 2e-5;
      EXPECT_NEAR(testing::dot(grad, u), numeric, 1e-3 * std::abs(numeric) + 1e-4)
          << tensor << " direction " << dir;
    }
  }
}

// Each sequence decoded token by token, as a prefill then single tokens, and two sequences a
// token at a time side by side (decode_batch), gives the rows of the full forward.
TEST_P(Attention, DecodeMatchesFullForward) {
  Harness h(GetParam());
  const int64_t B = 2, T = 9, d = h.cfg.hidden_size;
  const auto x = testing::random_vec(static_cast<size_t>(B * T * d), 4);
  std::vector<float> full(x.size());
  h.layer.forward(h.step, x.data(), {B, T}, full.data());
  auto rows_of = [&](int64_t b, int64_t t, int64_t rows) {
    return std::vector<float>(full.begin() + (b * T + t) * d,
                              full.begin() + (b * T + t + rows) * d);
  };
  for (int64_t prefill : {1, 4})
    for (int64_t b = 0; b < B; ++b) {
      const std::unique_ptr<DecodeCache> cache = h.layer.make_cache(T);
      for (int64_t t = 0; t < T;) {
        const int64_t rows = t == 0 ? prefill : 1;
        std::vector<float> out(static_cast<size_t>(rows * d));
        h.layer.decode(h.step, x.data() + (b * T + t) * d, rows, *cache, out.data());
        K3_EXPECT_CLOSE(out, rows_of(b, t, rows), 1e-5, 1e-4) << "prefill " << prefill;
        t += rows;
      }
    }
  std::vector<std::unique_ptr<DecodeCache>> caches;
  for (int64_t b = 0; b < B; ++b) caches.push_back(h.layer.make_cache(T));
  std::vector<DecodeCache*> ptrs = {caches[0].get(), caches[1].get()};
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> in, out(static_cast<size_t>(B * d));
    for (int64_t b = 0; b < B; ++b)
      in.insert(in.end(), x.begin() + (b * T + t) * d, x.begin() + (b * T + t + 1) * d);
    h.layer.decode_batch(h.step, in.data(), ptrs, out.data());
    for (int64_t b = 0; b < B; ++b)
      K3_EXPECT_CLOSE(std::vector<float>(out.begin() + b * d, out.begin() + (b + 1) * d),
                      rows_of(b, t, 1), 1e-5, 1e-4)
          << "batched, t " << t;
  }
}

}  // namespace
}  // namespace k3::model::attention_test
