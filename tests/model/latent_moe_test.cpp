#include "k3/model/layers/latent_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "common/test_util.h"
#include "k3/base/arena.h"
#include "k3/base/error.h"

namespace k3::model::latent_moe_test {
namespace {

using testing::random_vec;

const std::string kPrefix = "model.layers.1.block_sparse_moe";

ModelConfig small_config() {
  ModelConfig c;
  c.hidden_size = 12;
  c.num_hidden_layers = 2;
  c.num_experts = 6;
  c.num_experts_per_token = 2;
  c.moe_intermediate_size = 5;
  c.routed_expert_hidden_size = 7;
  c.num_shared_experts = 2;
  c.routed_scaling_factor = 2.5;
  return c;
}

// The same without the latent space: the experts act on x (moe_latent = false).
ModelConfig standard(ModelConfig c) {
  c.moe_latent = false;
  c.routed_expert_hidden_size = 0;
  return c;
}

// The math §5 math in double, one token at a time, with the weights read from a registry.
struct NaiveMoE {
  int64_t d, E, k, F, L, S;
  bool latent;  // false: the standard MoE, z = x and routed = r
  double scale, eps, b1, b2;
  std::map<std::string, std::vector<double>> w;  // by name, without the layer prefix

  NaiveMoE(const ModelConfig& c, const ParamRegistry& reg)
      : d(c.hidden_size),
        E(c.num_experts),
        k(c.num_experts_per_token),
        F(c.moe_intermediate_size),
        L(c.expert_dim()),
        S(c.num_shared_experts * c.moe_intermediate_size),
        latent(c.moe_latent),
        scale(c.routed_scaling_factor),
        eps(c.rms_norm_eps),
        b1(c.activation_situ_beta),
        b2(c.activation_situ_linear_beta) {
    for (int i = 0; i < reg.size(); ++i) {
      const float* v = reg.value(i).f32();
      w[reg.info(i).name.substr(kPrefix.size() + 1)].assign(v, v + reg.info(i).numel());
    }
  }

  // y = W x with W [out, in].
  std::vector<double> matvec(const std::string& name, const std::vector<double>& x) const {
    const std::vector<double>& W = w.at(name);
    std::vector<double> y(W.size() / x.size(), 0.0);
    for (size_t o = 0; o < y.size(); ++o)
      for (size_t i = 0; i < x.size(); ++i) y[o] += W[o * x.size() + i] * x[i];
    return y;
  }
  std::vector<double> situ_glu(const std::vector<double>& g, const std::vector<double>& u) const {
    std::vector<double> h(g.size());
    for (size_t i = 0; i < g.size(); ++i)
      h[i] = b1 * std::tanh(g[i] / b1) / (1 + std::exp(-g[i])) * b2 * std::tanh(u[i] / b2);
    return h;
  }
  // The experts one token picks, best first (ties to the lower index), and all its keys s + b.
  std::vector<int64_t> choose(const std::vector<double>& x, std::vector<double>* keys) const {
    std::vector<double> logits = matvec("gate.weight", x);
    keys->resize(E);
    for (int64_t e = 0; e < E; ++e)
      (*keys)[e] = 1 / (1 + std::exp(-logits[e])) + w.at("gate.e_score_correction_bias")[e];
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return (*keys)[a] > (*keys)[b]; });
    return order;
  }
  std::vector<double> token(const std::vector<double>& x) const {
    std::vector<double> keys;
    const std::vector<int64_t> order = choose(x, &keys);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += keys[order[j]] - w.at("gate.e_score_correction_bias")[order[j]];
    const std::vector<double> z = latent ? matvec("routed_expert_down_proj.weight", x) : x;
    std::vector<double> r(L, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      const double s = keys[e] - w.at("gate.e_score_correction_bias")[e];
      const std::string ex = "experts." + std::to_string(e);
      const auto y = matvec(ex + ".w2.weight",
                            situ_glu(matvec(ex + ".w1.weight", z), matvec(ex + ".w3.weight", z)));
      for (int64_t c = 0; c < L; ++c) r[c] += s / (sum + 1e-20) * scale * y[c];
    }
    if (latent) {
      double ms = 0;
      for (double v : r) ms += v * v / static_cast<double>(L);
      for (int64_t c = 0; c < L; ++c)
        r[c] *= w.at("routed_expert_norm.weight")[c] / std::sqrt(ms + eps);
    }
    std::vector<double> out = latent ? matvec("routed_expert_up_proj.weight", r) : r;
    if (S > 0) {
      const auto shared = matvec("shared_experts.down_proj.weight",
                                 situ_glu(matvec("shared_experts.gate_proj.weight", x),
                                          matvec("shared_experts.up_proj.weight", x)));
      for (int64_t c = 0; c < d; ++c) out[c] += shared[c];
    }
    return out;
  }
  std::vector<double> forward(const std::vector<double>& x) const {
    std::vector<double> out;
    for (size_t t = 0; t < x.size() / d; ++t) {
      const auto o = token(std::vector<double>(x.begin() + t * d, x.begin() + (t + 1) * d));
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  }
  // The smallest gap between a token's k-th and (k+1)-th key: how far the data is from a tie.
  double selection_margin(const std::vector<double>& x) const {
    double margin = INFINITY;
    for (size_t t = 0; t < x.size() / d; ++t) {
      std::vector<double> keys;
      const auto order =
          choose(std::vector<double>(x.begin() + t * d, x.begin() + (t + 1) * d), &keys);
      margin = std::min(margin, keys[order[k - 1]] - keys[order[k]]);
    }
    return margin;
  }
};

// A layer with its registry, a step arena, and random weights of size O(1) so that every path
// carries signal.
struct Fixture {
  ModelConfig c;
  ParamRegistry reg;
  LatentMoE moe;
  Arena arena{size_t{64} << 20, false};
  activation::ActivationManager acts;
  int64_t T;
  std::vector<float> x;

  explicit Fixture(ModelConfig cfg = small_config(), int64_t tokens = 9, uint64_t seed = 1)
      : c(cfg), moe(reg, kPrefix, c), T(tokens) {
    reg.allocate();
    reg.initialize(seed);
    x = random_vec(T * c.hidden_size, seed);
  }
  void randomize(uint64_t seed) {
    for (int i = 0; i < reg.size(); ++i) {
      const std::string& name = reg.info(i).name;
      const bool norm = name.find("norm") != std::string::npos;
      const auto v = is_router_bias(name) ? random_vec(reg.info(i).numel(), seed + i, -0.2, 0.2)
                     : norm               ? random_vec(reg.info(i).numel(), seed + i, 0.5, 1.5)
                                          : random_vec(reg.info(i).numel(), seed + i, -0.5, 0.5);
      std::copy(v.begin(), v.end(), reg.value(i).f32());
    }
  }
  std::vector<float> forward(bool training = false) {
    ArenaScope scope(arena);
    Step s{arena, acts, reg, training};
    std::vector<float> out(T * c.hidden_size);
    moe.forward(s, x.data(), T, out.data());
    acts.clear();
    return out;
  }
  // Gradients of <out, R>: returns dx; parameter gradients are left in the registry.
  std::vector<float> backward(const std::vector<float>& R) {
    reg.zero_grads();
    ArenaScope scope(arena);
    Step s{arena, acts, reg, true};
    std::vector<float> out(T * c.hidden_size), dx(T * c.hidden_size);
    moe.forward(s, x.data(), T, out.data());
    moe.backward(s, R.data(), T, dx.data());
    acts.clear();
    return dx;
  }
};

// Weights and inputs such that no routing decision is within `margin` of a tie (finite
// differences must not flip a choice): the first seed that gives one.
void keep_away_from_ties(Fixture& f, double margin) {
  for (uint64_t seed = 1; seed < 200; ++seed) {
    f.randomize(seed * 100);
    f.x = random_vec(f.T * f.c.hidden_size, seed);
    if (NaiveMoE(f.c, f.reg).selection_margin(testing::cast_vec<double>(f.x)) > margin) return;
  }
  FAIL() << "no seed keeps the routing away from ties";
}

TEST(LatentMoE, NamesShapesAndInit) {
  ModelConfig c = small_config();
  c.hidden_size = 64, c.moe_intermediate_size = 32, c.routed_expert_hidden_size = 48,
  c.num_experts = 8;
  Fixture f(c);
  const ParamRegistry& p = f.reg;
  auto shape = [&](const std::string& name) { return p.info(p.find(kPrefix + "." + name)).shape; };
  EXPECT_EQ(shape("gate.weight"), (Shape{8, 64}));
  EXPECT_EQ(shape("gate.e_score_correction_bias"), (Shape{8}));
  EXPECT_EQ(shape("routed_expert_down_proj.weight"), (Shape{48, 64}));
  EXPECT_EQ(shape("routed_expert_norm.weight"), (Shape{48}));
  EXPECT_EQ(shape("routed_expert_up_proj.weight"), (Shape{64, 48}));
  EXPECT_EQ(shape("experts.7.w1.weight"), (Shape{32, 48}));
  EXPECT_EQ(shape("experts.7.w3.weight"), (Shape{32, 48}));
  EXPECT_EQ(shape("experts.7.w2.weight"), (Shape{48, 32}));
  EXPECT_EQ(shape("shared_experts.gate_proj.weight"), (Shape{64, 64}));
  EXPECT_EQ(shape("shared_experts.up_proj.weight"), (Shape{64, 64}));
  EXPECT_EQ(shape("shared_experts.down_proj.weight"), (Shape{64, 64}));
  EXPECT_EQ(p.size(), 5 + 3 * 8 + 3);
  // Expert e's three tensors are one block of the flat buffer, expert e+1's right after.
  for (int e = 0; e < 8; ++e) {
    const std::string ex = kPrefix + ".experts." + std::to_string(e);
    const ParamInfo &w1 = p.info(p.find(ex + ".w1.weight")),
                    &w2 = p.info(p.find(ex + ".w2.weight"));
    EXPECT_EQ(p.info(p.find(ex + ".w3.weight")).offset, w1.offset + 32 * 48);
    EXPECT_EQ(w2.offset, w1.offset + 2 * 32 * 48);
    if (e < 7) {
      EXPECT_EQ(p.info(p.find(kPrefix + ".experts." + std::to_string(e + 1) + ".w1.weight")).offset,
                w2.offset + 48 * 32);
    }
  }
  // Init: the bias 0, the norm 1, matrices N(0, 0.02²), output projections scaled by 1/sqrt(2N).
  auto values = [&](const std::string& name) {
    const Tensor t = p.value(p.find(kPrefix + "." + name));
    return std::vector<float>(t.f32(), t.f32() + t.numel());
  };
  auto rms = [](const std::vector<float>& v) {
    double s = 0;
    for (float a : v) s += double(a) * a;
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  EXPECT_EQ(values("gate.e_score_correction_bias"), std::vector<float>(8, 0.f));
  EXPECT_EQ(values("routed_expert_norm.weight"), std::vector<float>(48, 1.f));
  EXPECT_NEAR(rms(values("experts.3.w1.weight")), 0.02, 0.002);
  EXPECT_NEAR(rms(values("experts.3.w2.weight")), 0.01, 0.001);  // 0.02 / sqrt(2 · 2 layers)
  EXPECT_NEAR(rms(values("routed_expert_up_proj.weight")), 0.01, 0.001);
  EXPECT_NEAR(rms(values("shared_experts.down_proj.weight")), 0.01, 0.001);
  EXPECT_NEAR(rms(values("routed_expert_down_proj.weight")), 0.02, 0.002);

  EXPECT_TRUE(is_router_bias(kPrefix + ".gate.e_score_correction_bias"));
  EXPECT_FALSE(is_router_bias(kPrefix + ".gate.weight"));
  EXPECT_EQ(f.moe.active_matmul_params(), 8 * 64 + 2 * 48 * 64 + 2 * 3 * 32 * 48 + 3 * 64 * 64);
}

TEST(LatentMoE, RejectsBadConfig) {
  ModelConfig c = small_config();
  c.num_experts_per_token = c.num_experts;
  ParamRegistry reg;
  try {
    LatentMoE moe(reg, kPrefix, c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.context().field, "num_experts_per_token");
  }
  c = small_config();
  c.routed_expert_hidden_size = 0;
  ParamRegistry reg2;
  EXPECT_THROW({ LatentMoE moe(reg2, kPrefix, c); }, Error);
}

TEST(LatentMoE, ForwardMatchesNaiveImplementation) {
  for (int64_t shared : {2, 0, -2}) {  // -2: two shared experts, without the latent space
    ModelConfig c = shared < 0 ? standard(small_config()) : small_config();
    c.num_shared_experts = std::abs(shared);
    Fixture f(c, 23);
    f.randomize(7);
    const std::vector<float> out = f.forward();
    const std::vector<double> want = NaiveMoE(f.c, f.reg).forward(testing::cast_vec<double>(f.x));
    K3_EXPECT_CLOSE(out, want, 1e-4, 1e-4);
    EXPECT_EQ(f.forward(true), out);  // training changes nothing in the output
  }
}

// Large experts run one after another with multi-threaded GEMMs, small ones side by side: both
// paths give the naive result.
TEST(LatentMoE, LargeExpertsMatchNaiveImplementation) {
  ModelConfig c = small_config();
  c.hidden_size = 32, c.num_experts = 4, c.moe_intermediate_size = 256,
  c.routed_expert_hidden_size = 256;
  c.num_shared_experts = 1;
  Fixture f(c, 1000);
  f.randomize(8);
  const std::vector<float> out = f.forward();
  const std::vector<double> want = NaiveMoE(f.c, f.reg).forward(testing::cast_vec<double>(f.x));
  K3_EXPECT_CLOSE(out, want, 1e-4, 1e-3);
}

// Every gradient element against central differences of the naive double implementation, with
// and without the latent space.
class LatentOrNot : public ::testing::TestWithParam<bool> {
 protected:
  ModelConfig config() const { return GetParam() ? small_config() : standard(small_config()); }
};

TEST_P(LatentOrNot, GradientsMatchNaiveFiniteDifferences) {
  Fixture f(config());
  keep_away_from_ties(f, 1e-3);
  const std::vector<float> R = random_vec(f.T * f.c.hidden_size, 99);
  const std::vector<double> Rd = testing::cast_vec<double>(R);
  const std::vector<float> dx = f.backward(R);
  NaiveMoE naive(f.c, f.reg);
  const std::vector<double> xd = testing::cast_vec<double>(f.x);

  const auto fd_x = testing::finite_difference(
      [&](const std::vector<double>& xx) { return testing::dot(naive.forward(xx), Rd); }, xd);
  K3_EXPECT_CLOSE(dx, fd_x, 1e-4, 1e-3);
  for (int i = 0; i < f.reg.size(); ++i) {
    const std::string name = f.reg.info(i).name.substr(kPrefix.size() + 1);
    const Tensor g = f.reg.grad(i);
    const std::vector<float> grad(g.f32(), g.f32() + g.numel());
    const auto fd = testing::finite_difference(
        [&](const std::vector<double>& v) {
          NaiveMoE n = naive;
          n.w[name] = v;
          return testing::dot(n.forward(xd), Rd);
        },
        naive.w.at(name));
    K3_EXPECT_CLOSE(grad, fd, 1e-4, 1e-3) << name;
    if (is_router_bias(f.reg.info(i).name)) {
      EXPECT_EQ(grad, std::vector<float>(grad.size(), 0.f));  // selection only: no gradient
    }
  }
}

// The layer's own fp32 forward along a random direction, per tensor: input and every parameter
// but the bias.
TEST_P(LatentOrNot, DirectionalDerivativesMatchFiniteDifferences) {
  Fixture f(config(), 16);
  keep_away_from_ties(f, 2e-2);
  const std::vector<float> R = random_vec(f.T * f.c.hidden_size, 5);
  const std::vector<float> dx = f.backward(R);
  auto check = [&](float* values, const float* grad, int64_t n, const std::string& what) {
    const std::vector<float> dir = random_vec(n, n), saved(values, values + n);
    double analytic = 0;
    for (int64_t i = 0; i < n; ++i) analytic += double(dir[i]) * grad[i];
    auto loss_at = [&](float eps) {
      for (int64_t i = 0; i < n; ++i) values[i] = saved[i] + eps * dir[i];
      return testing::dot(f.forward(), testing::cast_vec<double>(R));
    };
    const float eps = 1e-2f;
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    std::copy(saved.begin(), saved.end(), values);
    EXPECT_NEAR(numeric, analytic, 0.02 * std::abs(analytic) + 2e-3) << what;
  };
  check(f.x.data(), dx.data(), static_cast<int64_t>(f.x.size()), "x");
  for (int i = 0; i < f.reg.size(); ++i)
    if (!is_router_bias(f.reg.info(i).name))
      check(f.reg.value(i).f32(), f.reg.grad(i).f32(), f.reg.info(i).numel(), f.reg.info(i).name);
}

TEST(LatentMoE, TiesGoToTheLowerExpertIndex) {
  Fixture f;
  ParamRegistry& p = f.reg;
  // A zero router: every score is sigmoid(0) = 0.5, all tied; experts 0 and 1 win every token.
  p.value(p.find(kPrefix + ".gate.weight")).zero_();
  f.forward(true);
  EXPECT_EQ(f.moe.end_global_batch(p).load, (std::vector<int64_t>{9, 9, 0, 0, 0, 0}));
  // The update moved the bias; set it by hand so expert 4 leads and 0 is next.
  float* bias = p.value(f.moe.router_bias()).f32();
  std::fill(bias, bias + 6, 0.f);
  bias[4] = 0.1f;
  f.forward(true);
  EXPECT_EQ(f.moe.end_global_batch(p).load, (std::vector<int64_t>{9, 0, 0, 0, 9, 0}));
  // With tied scores each chosen expert's weight is 0.5 / (0.5 + 0.5) · scaling: the output is
  // then that of a router that always picks {4, 0} with weights 1.25 each.
  std::fill(bias, bias + 6, 0.f);
  bias[4] = 0.1f;
  const std::vector<double> want = NaiveMoE(f.c, p).forward(testing::cast_vec<double>(f.x));
  K3_EXPECT_CLOSE(f.forward(), want, 1e-4, 1e-4);
}

TEST(LatentMoE, TrainingForwardFeedsQuantileBalancing) {
  Fixture f;
  f.randomize(3);
  f.forward(false);
  EXPECT_EQ(f.moe.balancer().tokens(), 0);  // evaluation does not count
  f.forward(true);
  f.forward(true);
  EXPECT_EQ(f.moe.balancer().tokens(), 2 * f.T);
  const std::vector<float> bias_before(f.reg.value(f.moe.router_bias()).f32(),
                                       f.reg.value(f.moe.router_bias()).f32() + 6);
  const ExpertLoadStats st = f.moe.end_global_batch(f.reg);
  EXPECT_EQ(st.tokens, 2 * f.T);
  EXPECT_EQ(std::accumulate(st.load.begin(), st.load.end(), int64_t{0}), 2 * f.T * 2);
  EXPECT_EQ(f.moe.load_stats().load, st.load);
  EXPECT_EQ(f.moe.balancer().tokens(), 0);
  const float* bias = f.reg.value(f.moe.router_bias()).f32();
  EXPECT_NE(std::vector<float>(bias, bias + 6), bias_before);
  EXPECT_NEAR(std::accumulate(bias, bias + 6, 0.0), 0.0, 1e-5);
  EXPECT_EQ(f.moe.balancer_state_name(), kPrefix + ".quantile_balancing.range");
}

TEST(LatentMoE, HandlesAnEmptyBatch) {
  Fixture f(small_config(), 0);
  EXPECT_TRUE(f.forward(true).empty());
  EXPECT_TRUE(f.backward({}).empty());
  EXPECT_EQ(f.moe.end_global_batch(f.reg).tokens, 0);
}

TEST_P(LatentOrNot, DeterministicAndWithinItsArenaBudget) {
  ModelConfig c = config();
  c.hidden_size = 48, c.num_experts = 16, c.num_experts_per_token = 4;
  c.moe_intermediate_size = 24, c.routed_expert_hidden_size = 32;
  Fixture f(c, 300);
  f.randomize(4);
  const std::vector<float> R = random_vec(f.T * c.hidden_size, 6);
  auto run = [&] {
    std::vector<float> all = f.backward(R);
    all.insert(all.end(), f.reg.grads(), f.reg.grads() + f.reg.flat_size());
    const std::vector<float> out = f.forward();
    all.insert(all.end(), out.begin(), out.end());
    return all;
  };
  const std::vector<float> a = run(), b = run();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  const size_t budget = LatentMoE::arena_use(c, f.T).bytes();
  Arena exact(budget, false);
  Step s{exact, f.acts, f.reg, true};
  std::vector<float> out(f.T * c.hidden_size), dx(f.T * c.hidden_size);
  f.moe.forward(s, f.x.data(), f.T, out.data());
  f.moe.backward(s, R.data(), f.T, dx.data());  // throws if the arena is too small
  EXPECT_GT(exact.peak(), budget / 2);          // and the budget is not far off
  f.acts.clear();
}

INSTANTIATE_TEST_SUITE_P(LatentMoE, LatentOrNot, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Latent" : "Standard";
                         });

// Without the latent space: no latent projections or norm, experts [F, d] and [d, F].
TEST(LatentMoE, StandardMoeNamesShapesAndParams) {
  ModelConfig c = standard(small_config());
  c.hidden_size = 64, c.moe_intermediate_size = 32, c.num_experts = 8;
  Fixture f(c);
  const ParamRegistry& p = f.reg;
  auto shape = [&](const std::string& name) { return p.info(p.find(kPrefix + "." + name)).shape; };
  EXPECT_FALSE(f.moe.latent_space());
  EXPECT_EQ(shape("gate.weight"), (Shape{8, 64}));
  EXPECT_EQ(shape("experts.7.w1.weight"), (Shape{32, 64}));
  EXPECT_EQ(shape("experts.7.w3.weight"), (Shape{32, 64}));
  EXPECT_EQ(shape("experts.7.w2.weight"), (Shape{64, 32}));
  EXPECT_EQ(shape("shared_experts.down_proj.weight"), (Shape{64, 64}));
  for (const char* absent : {"routed_expert_down_proj.weight", "routed_expert_norm.weight",
                             "routed_expert_up_proj.weight"})
    EXPECT_LT(p.find(kPrefix + "." + absent), 0) << absent;
  EXPECT_EQ(p.size(), 2 + 3 * 8 + 3);
  EXPECT_EQ(f.moe.active_matmul_params(), 8 * 64 + 2 * 3 * 32 * 64 + 3 * 64 * 64);
}

// The bias balancer (moe_balancer = "bias") counts the training forwards' tokens and moves each
// bias by the update rate; it has no state beside the bias.
TEST(LatentMoE, TrainingForwardFeedsTheBiasBalancer) {
  ModelConfig c = standard(small_config());
  c.moe_balancer = "bias";
  c.moe_bias_update_rate = 0.125;
  Fixture f(c);
  f.randomize(3);
  f.forward(false);
  EXPECT_EQ(f.moe.balancer().tokens(), 0);
  f.forward(true);
  EXPECT_EQ(f.moe.balancer().tokens(), f.T);
  const float* bias = f.reg.value(f.moe.router_bias()).f32();
  const std::vector<float> before(bias, bias + 6);
  const ExpertLoadStats st = f.moe.end_global_batch(f.reg);
  EXPECT_EQ(std::accumulate(st.load.begin(), st.load.end(), int64_t{0}), f.T * 2);
  for (int64_t e = 0; e < 6; ++e) {
    // Mean load 9·2/6 = 3.
    const float step = st.load[e] < 3 ? 0.125f : st.load[e] > 3 ? -0.125f : 0.f;
    EXPECT_EQ(bias[e], before[e] + step) << "expert " << e << ", load " << st.load[e];
  }
  EXPECT_TRUE(f.moe.balancer().state().empty());
}

}  // namespace
}  // namespace k3::model::latent_moe_test
