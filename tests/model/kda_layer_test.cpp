#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/model/layers/kda.h"

namespace k3::model::kda_layer_test {
namespace {

using testing::random_vec;

const char* kPrefix = "model.layers.1.self_attn";

nlohmann::json small_json(bool unbounded) {
  return {{"vocab_size", 259},
          {"hidden_size", 24},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"intermediate_size", 32},
          {"linear_attn_config",
           {{"num_heads", 3},
            {"head_dim", 8},
            {"short_conv_kernel_size", 4},
            {"gate_lower_bound", -5.0},
            {"unbounded_gate", unbounded}}}};
}

ModelConfig small_config(bool unbounded = false) {
  return parse_model_config(small_json(unbounded), "kda.json");
}

std::string error_of(const nlohmann::json& j) {
  return testing::error_of([&] { parse_model_config(j, "kda.json"); });
}

// K3's released configuration, with its text_config nesting and 1-based layer lists.
TEST(KdaConfig, ReadsK3LinearAttnConfig) {
  K3_SKIP_WITHOUT_SHARED("reference/kimi-k3/config.json", "the released K3 config");
  const std::string path = testing::shared_dir() + "/reference/kimi-k3/config.json";
  const ModelConfig c = load_model_config(path);
  EXPECT_EQ(c.kda_layers.size(), 69u);
  EXPECT_EQ(c.full_attn_layers.size(), 24u);
  EXPECT_EQ(c.full_attn_layers.back(), 93);
  EXPECT_EQ(c.kda_num_heads, 96);
  EXPECT_EQ(c.kda_head_dim, 128);
  EXPECT_EQ(c.kda_short_conv_kernel_size, 4);
  EXPECT_EQ(c.kda_gate_lower_bound, -5.0);
  EXPECT_FALSE(c.kda_unbounded_gate);
  EXPECT_EQ(c.kda_dim(), 12288);
  // Written nested again, and read back the same.
  const nlohmann::json back = model_config_to_json(small_config(true));
  EXPECT_EQ(back.at("linear_attn_config").at("head_dim"), 8);
  EXPECT_TRUE(parse_model_config(back, "again.json").kda_unbounded_gate);
}

TEST(KdaConfig, ErrorsNameTheField) {
  EXPECT_EQ(error_of(small_json(false)), "");
  auto j = small_json(false);
  j["linear_attn_config"]["head_dim"] = 0;
  EXPECT_NE(error_of(j).find("field linear_attn_config.head_dim: must be positive"),
            std::string::npos)
      << error_of(j);
  j = small_json(false);
  j["linear_attn_config"]["num_heads"] = "many";
  EXPECT_NE(error_of(j).find("field linear_attn_config.num_heads: expected an integer"),
            std::string::npos);
  j = small_json(false);
  j["linear_attn_config"]["gate_lower_bound"] = 1.0;
  EXPECT_NE(error_of(j).find("field linear_attn_config.gate_lower_bound"), std::string::npos);
  j = small_json(false);
  j["linear_attn_config"] = 5;
  EXPECT_NE(error_of(j).find("field linear_attn_config: expected a JSON object"),
            std::string::npos);
  // Without linear_attn_config there is no KDA, and a KDA layer refuses to be built.
  j = small_json(false);
  j.erase("linear_attn_config");
  ParamRegistry reg;
  const ModelConfig dense = parse_model_config(j, "dense.json");
  EXPECT_THROW(KimiDeltaAttention(reg, kPrefix, dense), Error);
}

// The decays the gate produces. Fast: dt_bias in [−2, 1], ~−0.5 to −3.5 per token, a chunk's entry
// state all but gone by its end. Slow: dt_bias in [−7, −5], mostly −0.001 to −0.1 per token (a
// freshly initialized layer's range), so the state each chunk hands to the next matters.
enum class Decays { Fast, Slow };

struct Fixture {
  ModelConfig c;
  ParamRegistry reg;
  KimiDeltaAttention layer;
  Arena arena{size_t{64} << 20, false};
  activation::ActivationManager acts;

  explicit Fixture(bool unbounded = false, Decays decays = Decays::Fast)
      : c(small_config(unbounded)), layer(reg, kPrefix, c) {
    reg.allocate();
    reg.initialize(7);
    // Away from the initial values, so that every parameter matters.
    auto perturb = [&](const std::string& name, double lo, double hi) {
      const Tensor t = reg.value(reg.find(std::string(kPrefix) + name));
      const auto v = random_vec(static_cast<size_t>(t.numel()), 99, lo, hi);
      std::copy(v.begin(), v.end(), t.f32());
    };
    perturb(".A_log", -1, 0.5);
    perturb(".o_norm.weight", 0.5, 1.5);
    if (decays == Decays::Fast)
      perturb(".dt_bias", -2, 1);
    else
      perturb(".dt_bias", -7, -5);
    for (const char* m :
         {".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".g_proj.weight", ".b_proj.weight",
          ".f_a_proj.weight", ".f_b_proj.weight", ".o_proj.weight"})
      perturb(m, -0.3, 0.3);
  }
  Step step(bool training) { return Step{arena, acts, reg, training}; }

  std::vector<float> forward(const std::vector<float>& x, int64_t B, int64_t T) {
    ArenaScope scope(arena);
    std::vector<float> out(x.size());
    layer.forward(step(false), x.data(), {B, T}, out.data());
    return out;
  }
  // Forward and backward of <out, R> in training mode, on the rows given as B rows of T or as one
  // row of packed documents: fills out and dx, adds to the parameter gradients.
  void forward_backward(const float* x, const float* R, float* out, float* dx,
                        const Sequences& seq) {
    ArenaScope scope(arena);
    layer.forward(step(true), x, seq, out);
    layer.backward(step(true), R, seq, dx);
    acts.clear();
  }
};

TEST(KdaLayer, NamesShapesAndInitialization) {
  const ModelConfig c = small_config();
  ParamRegistry reg;
  KimiDeltaAttention layer(reg, kPrefix, c);
  reg.allocate();
  reg.initialize(7);
  const std::string p = kPrefix;
  const std::vector<std::pair<std::string, Shape>> expected = {{".q_proj.weight", {24, 24}},
                                                               {".k_proj.weight", {24, 24}},
                                                               {".v_proj.weight", {24, 24}},
                                                               {".q_conv1d.weight", {24, 1, 4}},
                                                               {".k_conv1d.weight", {24, 1, 4}},
                                                               {".v_conv1d.weight", {24, 1, 4}},
                                                               {".f_a_proj.weight", {8, 24}},
                                                               {".f_b_proj.weight", {24, 8}},
                                                               {".b_proj.weight", {3, 24}},
                                                               {".A_log", {3}},
                                                               {".dt_bias", {24}},
                                                               {".o_norm.weight", {8}},
                                                               {".g_proj.weight", {24, 24}},
                                                               {".o_proj.weight", {24, 24}}};
  EXPECT_EQ(reg.size(), static_cast<int>(expected.size()));
  for (const auto& [name, shape] : expected) {
    const int i = reg.find(p + name);
    ASSERT_GE(i, 0) << name;
    EXPECT_EQ(reg.info(i).shape, shape) << name;
  }
  const Tensor a = reg.value(reg.find(p + ".A_log")), w = reg.value(reg.find(p + ".o_norm.weight"));
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.f32()[i], 0.0f);
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(w.f32()[i], 1.0f);
  const Tensor dt = reg.value(reg.find(p + ".dt_bias"));
  for (int64_t i = 0; i < dt.numel(); ++i) {
    const double softplus = std::log1p(std::exp(double(dt.f32()[i])));
    EXPECT_GE(softplus, 1e-3 * 0.999);
    EXPECT_LE(softplus, 0.1 * 1.001);
  }
  const Tensor conv = reg.value(reg.find(p + ".k_conv1d.weight"));
  for (int64_t i = 0; i < conv.numel(); ++i) EXPECT_LE(std::abs(conv.f32()[i]), 0.5f);
}

// loss = <out, R>: the gradient along a random direction of (x, every parameter) against the
// central difference of the fp32 forward, for both gate forms. T crosses a chunk boundary; with
// slow decays it spans two full chunks, so the state gradient the last chunk hands back passes
// through a full chunk's decay before it reaches the first.
TEST(KdaLayer, DirectionalDerivativeMatchesFiniteDifference) {
  const std::tuple<bool, Decays, int64_t> cases[] = {
      {false, Decays::Fast, 70}, {true, Decays::Fast, 70}, {false, Decays::Slow, 2 * 64 + 10}};
  for (const auto& [unbounded, decays, T] : cases) {
    Fixture f(unbounded, decays);
    const int64_t B = 2, d = f.c.hidden_size;
    const auto x0 = random_vec(B * T * d, 1), R = random_vec(B * T * d, 2);
    f.reg.zero_grads();
    std::vector<float> out(x0.size()), dx(x0.size());
    f.forward_backward(x0.data(), R.data(), out.data(), dx.data(), {B, T});
    const size_t np = f.reg.flat_size();
    const auto dir_p = random_vec(np, 3), dir_x = random_vec(x0.size(), 4);
    double analytic = 0;
    for (size_t i = 0; i < np; ++i) analytic += double(dir_p[i]) * f.reg.grads()[i];
    for (size_t i = 0; i < x0.size(); ++i) analytic += double(dir_x[i]) * dx[i];
    const std::vector<float> p0(f.reg.values(), f.reg.values() + np);
    auto loss_at = [&](double eps) {
      std::vector<float> x(x0.size());
      for (size_t i = 0; i < np; ++i) f.reg.values()[i] = float(p0[i] + eps * dir_p[i]);
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(x0[i] + eps * dir_x[i]);
      return testing::dot(f.forward(x, B, T), testing::cast_vec<double>(R));
    };
    const double eps = 1e-3;  // the L2 norms make larger steps visibly nonlinear
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(numeric, analytic, 0.005 * std::abs(analytic) + 1e-3)
        << "unbounded " << unbounded << ", T=" << T;
  }
}

// Three documents packed in one row equal three separate runs: outputs, input gradients and the
// summed parameter gradients.
TEST(KdaLayer, PackedDocumentsEqualSeparateRuns) {
  Fixture f;
  const int64_t T = 90, d = f.c.hidden_size;
  const std::vector<int64_t> starts = {0, 5, 71};
  const auto x = random_vec(T * d, 1), R = random_vec(T * d, 2);
  const size_t np = f.reg.flat_size();

  std::vector<float> out(T * d), dx(T * d);
  f.reg.zero_grads();
  f.forward_backward(x.data(), R.data(), out.data(), dx.data(), {1, T, starts});
  const std::vector<float> packed_grads(f.reg.grads(), f.reg.grads() + np);

  std::vector<float> sep_out(T * d), sep_dx(T * d);
  f.reg.zero_grads();
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t b = starts[i], len = (i + 1 < starts.size() ? starts[i + 1] : T) - b;
    f.forward_backward(x.data() + b * d, R.data() + b * d, sep_out.data() + b * d,
                       sep_dx.data() + b * d, {1, len});
  }
  const std::vector<float> sep_grads(f.reg.grads(), f.reg.grads() + np);
  K3_EXPECT_CLOSE(out, sep_out, 1e-6, 1e-5);
  K3_EXPECT_CLOSE(dx, sep_dx, 1e-6, 1e-5);
  K3_EXPECT_CLOSE(packed_grads, sep_grads, 1e-5, 1e-4);
  EXPECT_THROW(
      f.layer.forward(f.step(false), x.data(), {1, T, std::vector<int64_t>{0, 50, 40}}, out.data()),
      Error);
}

// Token-by-token decoding equals the chunked forward (outputs) and the prefill's final state. With
// slow decays over two full chunks and a partial one, the state the second chunk receives (the
// first starts from zero) reaches the later tokens' outputs.
TEST(KdaLayer, DecodeStepsMatchChunkedPrefill) {
  const std::tuple<bool, Decays, int64_t> cases[] = {
      {false, Decays::Fast, 75}, {true, Decays::Fast, 75}, {false, Decays::Slow, 2 * 64 + 11}};
  for (const auto& [unbounded, decays, T] : cases) {
    Fixture f(unbounded, decays);
    const int64_t B = 2, d = f.c.hidden_size;
    const auto x = random_vec(B * T * d, 1);
    const std::vector<float> full = f.forward(x, B, T);

    KdaCache prefilled = f.layer.make_batch_cache(B);
    std::vector<float> out(x.size());
    f.layer.prefill(f.step(false), x.data(), T, prefilled, out.data());
    K3_EXPECT_CLOSE(out, full, 1e-6, 1e-5);
    EXPECT_EQ(prefilled.length, T);

    KdaCache stepped = f.layer.make_batch_cache(B);
    std::vector<float> xt(B * d), yt(B * d), stepped_out(x.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(x.begin() + (b * T + t) * d, d, xt.begin() + b * d);
      f.layer.decode_step(f.step(false), xt.data(), stepped, yt.data());
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(yt.begin() + b * d, d, stepped_out.begin() + (b * T + t) * d);
    }
    K3_EXPECT_CLOSE(stepped_out, full, 1e-5, 1e-4) << ", unbounded " << unbounded << ", T=" << T;
    auto values = [](const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); };
    K3_EXPECT_CLOSE(values(stepped.state), values(prefilled.state), 1e-5, 1e-4) << ", T=" << T;
    // The windows hold projections, computed here for one row at a time and there for all.
    for (auto w : {&KdaCache::q_window, &KdaCache::k_window, &KdaCache::v_window})
      K3_EXPECT_CLOSE(values(stepped.*w), values(prefilled.*w), 1e-6, 1e-5);
  }
}

// Through the model's interface: a prefill of part of a sequence, then single tokens, then another
// prefill, equal one forward over the whole sequence, whose chunks lie elsewhere.
TEST(KdaLayer, PrefillAndDecodeContinueOneLongForward) {
  for (Decays decays : {Decays::Fast, Decays::Slow}) {
    Fixture f(false, decays);
    const int64_t T = 150, d = f.c.hidden_size;
    const auto x = random_vec(T * d, 5);
    const std::vector<float> full = f.forward(x, 1, T);
    std::unique_ptr<DecodeCache> cache = f.layer.make_cache(T);
    std::vector<float> out(x.size());
    const int64_t pieces[][2] = {{0, 67}, {67, 68}, {68, 69}, {69, 70}, {70, T}};
    for (auto [begin, end] : pieces)
      f.layer.decode(f.step(false), x.data() + begin * d, end - begin, *cache,
                     out.data() + begin * d);
    EXPECT_EQ(cache->length, T);
    K3_EXPECT_CLOSE(out, full, 1e-5, 1e-4) << (decays == Decays::Slow ? ", slow" : ", fast");
  }
}

TEST(KdaLayer, BackwardIsDeterministic) {
  Fixture f;
  const int64_t B = 2, T = 40, d = f.c.hidden_size;
  const auto x = random_vec(B * T * d, 1), R = random_vec(B * T * d, 2);
  auto grads = [&] {
    std::vector<float> out(x.size()), dx(x.size());
    f.reg.zero_grads();
    f.forward_backward(x.data(), R.data(), out.data(), dx.data(), {B, T});
    dx.insert(dx.end(), f.reg.grads(), f.reg.grads() + f.reg.flat_size());
    return dx;
  };
  EXPECT_EQ(grads(), grads());
}

}  // namespace
}  // namespace k3::model::kda_layer_test
