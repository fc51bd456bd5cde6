// The model's gradient, one parameter group at a time, against central finite differences of the
// loss. A group is one role in one layer kind: e.g. the output gates of every MLA layer
// ("model.layers.<mla>.self_attn.g_proj.weight") or the w1 of every routed expert, so a wrong
// gradient in one role cannot hide behind the far larger gradients of the others.
//
// A step that changes which experts some token chooses makes the loss jump, so every point is
// evaluated with a training forward whose Quantile Balancing counts give each expert's tokens:
// where any count differs from the base point's, the step is halved and tried again.
//
// The model and its layers run in fp32 only, so the loss sum (~170 here) carries rounding noise,
// measured at up to 5e-6. Each step t is sized to move the loss by ~2e-3 (at most 1% of the group's
// norm), and for every group the tolerance is
//   |numeric − analytic| ≤ 1e-2 |analytic| + 3e-5 / t:
// the 1% covers what curvature the extrapolated difference leaves (measured below 0.2%), the
// second term the noise of the combined differences (3 × 1e-5 / t). A flipped sign is off by 200%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/ablations.h"
#include "common/model_util.h"
#include "common/test_util.h"
#include "k3/model/layers/latent_moe.h"
#include "k3/model/model.h"

namespace k3::model::gradient_check_test {
namespace {

constexpr double kLossChange = 2e-3;  // the loss change a step aims for
constexpr double kLossNoise = 1e-5;   // the loss sum's rounding noise, with a margin of 2
constexpr double kRtol = 1e-2;
constexpr double kMaxStep = 1e-2;  // a step moves a group by at most 1% of its norm
constexpr int kDraws = 3;          // per group: one along the gradient's signs, two random
constexpr int kStepsTried = 6;     // a step that changes the routing is halved

// The name with the layer index replaced by the kind of the layer's mixer (for the mixer's own
// weights) or '*', and the expert index by '*'.
std::string role_of(const Model& m, const std::string& name) {
  static const std::regex layer(R"(^model\.layers\.(\d+)\.(.*)$)"), expert(R"(\.experts\.\d+\.)");
  std::smatch parts;
  std::string role = name;
  if (std::regex_match(name, parts, layer)) {
    const std::string rest = parts[2];
    role = "model.layers.";
    if (rest.starts_with("self_attn."))
      role.append("<").append(mixer_kind_name(m.layer_mixer(std::stoll(parts[1])))).append(">");
    else
      role.append("*");
    role.append(".").append(rest);
  }
  return std::regex_replace(role, expert, ".experts.*.");
}

struct Group {
  std::string role;
  std::vector<size_t> coords;  // offsets into the flat buffers
};

// Every group in registration order. The router bias is left out: it only selects experts (the
// loss is piecewise constant in it, and by design no gradient reaches it).
std::vector<Group> groups_of(const Model& m) {
  const ParamRegistry& p = m.params();
  std::vector<Group> out;
  std::map<std::string, size_t> index;
  for (int i = 0; i < p.size(); ++i) {
    const ParamInfo& info = p.info(i);
    if (is_router_bias(info.name)) continue;
    auto [it, fresh] = index.try_emplace(role_of(m, info.name), out.size());
    if (fresh) out.push_back({it->first, {}});
    for (int64_t j = 0; j < info.numel(); ++j)
      out[it->second].coords.push_back(info.offset + static_cast<size_t>(j));
  }
  return out;
}

// The loss sum and the routing at one point of parameter space.
struct Point {
  double loss = 0;
  std::vector<int64_t> loads;  // tokens per expert of every MoE layer: moves when routing does
};

// One directional check: nullopt when every step tried changed the routing.
struct Draw {
  double analytic, numeric, step;
};

class GradientCheck {
 public:
  explicit GradientCheck(ModelConfig c) : model_(std::move(c)) {
    model_.initialize(11);
    testing::perturb_attn_res(model_);
    tokens_ = testing::random_tokens(static_cast<size_t>(B * T), 259, 1);
    targets_ = testing::random_tokens(static_cast<size_t>(B * T), 259, 2);
    targets_[3] = -100;  // an ignored position
    if (model_.has_vision()) {
      // Two images: tokens 1.. of the first row and 2.. of the second are placeholders.
      const ModelConfig& c = model_.config();
      const int64_t per = c.image_tokens();
      for (int64_t at : {int64_t{1}, T + 2})
        for (int64_t j = 0; j < per; ++j)
          tokens_[static_cast<size_t>(at + j)] = c.media_placeholder_token_id;
      images_ = testing::random_vec(static_cast<size_t>(2 * 3 * c.vt_image_size * c.vt_image_size),
                                    3, 0, 1);
    }
  }
  Model& model() { return model_; }

  // The current parameters become the base point, and their gradient the one under test.
  void freeze_base() {
    ParamRegistry& p = model_.params();
    base_.assign(p.values(), p.values() + p.flat_size());
    balancer_ = model_.balancer_state();
    p.zero_grads();
    base_point_ = evaluate();
    grad_.assign(p.grads(), p.grads() + p.flat_size());
  }

  // dir: one entry per coordinate of g. The central differences at steps t and t/2, combined as
  // (4 D(t/2) − D(t)) / 3, cancel the third-order term: the Attention Residuals' peaked mixing
  // weights curve the loss enough that a plain central difference misses by a few percent.
  std::optional<Draw> check(const Group& g, const std::vector<double>& dir) {
    double slope = 0;
    for (size_t i = 0; i < dir.size(); ++i) slope += grad_[g.coords[i]] * dir[i];
    double t = std::min(kLossChange / std::abs(slope), kMaxStep);
    for (int tries = 0; tries < kStepsTried; ++tries, t /= 2) {
      const std::optional<Draw> full = central(g, dir, t), half = central(g, dir, t / 2);
      if (!full || !half) continue;
      return Draw{(4 * half->analytic - full->analytic) / 3,
                  (4 * half->numeric - full->numeric) / 3, t};
    }
    return std::nullopt;
  }

  // A unit direction over g, scaled by the group's norm (at least 0.02 per coordinate, for groups
  // that start at zero). Draw 0 follows the signs of the gradient, with random magnitudes: every
  // coordinate adds to the slope, so a wrong sign anywhere shows. Later draws are plain Gaussian.
  std::vector<double> direction(const Group& g, int draw, std::mt19937_64& rng) const {
    std::normal_distribution<double> normal;
    std::vector<double> dir(g.coords.size());
    double dir_norm = 0, value_norm = 0;
    for (size_t i = 0; i < dir.size(); ++i) {
      dir[i] = normal(rng);
      if (draw == 0) dir[i] = std::copysign(dir[i], grad_[g.coords[i]]);
      dir_norm += dir[i] * dir[i];
      value_norm += double(base_[g.coords[i]]) * base_[g.coords[i]];
    }
    const double scale = std::max(std::sqrt(value_norm), 0.02 * std::sqrt(double(dir.size())));
    for (double& x : dir) x *= scale / std::sqrt(dir_norm);
    return dir;
  }

 private:
  // The central difference at step t; nullopt when either side routes differently from the base.
  // The analytic side uses the steps really applied (after rounding to fp32).
  std::optional<Draw> central(const Group& g, const std::vector<double>& dir, double t) {
    std::vector<double> plus(dir.size()), minus(dir.size());
    const Point p = at(g, dir, t, plus), m = at(g, dir, -t, minus);
    if (p.loads != base_point_.loads || m.loads != base_point_.loads) return std::nullopt;
    double analytic = 0;
    for (size_t i = 0; i < dir.size(); ++i) analytic += grad_[g.coords[i]] * (plus[i] - minus[i]);
    return Draw{analytic / (2 * t), (p.loss - m.loss) / (2 * t), t};
  }

  // base + t·dir on g's coordinates; `applied` gets the steps as rounded to fp32.
  Point at(const Group& g, const std::vector<double>& dir, double t, std::vector<double>& applied) {
    float* v = model_.params().values();
    for (size_t i = 0; i < dir.size(); ++i) {
      const size_t c = g.coords[i];
      v[c] = static_cast<float>(base_[c] + t * dir[i]);
      applied[i] = double(v[c]) - base_[c];
    }
    Point pt = evaluate();
    std::copy(base_.begin(), base_.end(), v);
    return pt;
  }

  // A training forward, so that the balancers count each expert's tokens. The Quantile Balancing
  // update that reads the counts also moves the router bias (restored by the caller) and the
  // balancers' range (restored here).
  Point evaluate() {
    Point pt;
    TokenBatch b{tokens_.data(), targets_.data(), B, T};
    b.images = images_.empty() ? nullptr : images_.data();
    b.num_images = images_.empty() ? 0 : 2;
    pt.loss = model_.forward_backward(arena_, acts_, b, 1.f).sum;
    for (const auto& [layer, stats] : model_.end_global_batch())
      pt.loads.insert(pt.loads.end(), stats.load.begin(), stats.load.end());
    model_.restore_balancer_state(balancer_, "base point");
    return pt;
  }

  static constexpr int64_t B = 2, T = 16;
  Model model_;
  Arena arena_{size_t{64} << 20, false};
  activation::ActivationManager acts_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<float> images_, base_, grad_;
  std::vector<std::pair<std::string, Tensor>> balancer_;
  Point base_point_;
};

// How many draws were checked, and how many skipped because every step tried changed the routing.
struct Skips {
  int checked = 0, skipped = 0;
};

// Checks every group of the model.
Skips check_every_group(GradientCheck& gc) {
  testing::ScopedThreads one(1);  // tiny GEMMs: threads only add waiting
  gc.freeze_base();
  Skips s;
  for (const Group& g : groups_of(gc.model())) {
    std::mt19937_64 rng(stream_of(g.role));
    int checked = 0;
    for (int draw = 0; draw < kDraws; ++draw) {
      const std::optional<Draw> d = gc.check(g, gc.direction(g, draw, rng));
      if (!d) {
        ++s.skipped;
        continue;
      }
      ++checked;
      ++s.checked;
      EXPECT_NEAR(d->numeric, d->analytic, kRtol * std::abs(d->analytic) + 3 * kLossNoise / d->step)
          << g.role << ", draw " << draw << ", step " << d->step;
    }
    // A group must not escape entirely through routing changes.
    EXPECT_GE(checked, kDraws - 1) << g.role;
  }
  return s;
}

ModelConfig config(const std::string& name) {
  return load_model_config(testing::source_dir() + "/configs/" + name);
}

// Groups gather one role across the layers of one kind, and the experts of a layer.
TEST(GradientCheck, GroupsAreRolesOfLayerKinds) {
  const Model m(config("k3-nano.json"), false);
  std::map<std::string, size_t> sizes;
  for (const Group& g : groups_of(m)) sizes[g.role] = g.coords.size();
  // 6 KDA layers of 4 heads of 16, 2 MLA layers of 4 heads with d_v = 16, 7 MoE layers of 8
  // experts [32, 32].
  EXPECT_EQ(sizes["model.layers.<kda>.self_attn.g_proj.weight"], 6u * 64 * 64);
  EXPECT_EQ(sizes["model.layers.<mla>.self_attn.g_proj.weight"], 2u * 64 * 64);
  EXPECT_EQ(sizes["model.layers.<kda>.self_attn.A_log"], 6u * 4);
  EXPECT_EQ(sizes["model.layers.*.block_sparse_moe.experts.*.w1.weight"], 7u * 8 * 32 * 32);
  EXPECT_EQ(sizes["model.layers.*.mlp_res_proj.weight"], 8u * 64);
  EXPECT_EQ(sizes.count("model.layers.*.block_sparse_moe.gate.e_score_correction_bias"), 0u);
  EXPECT_EQ(sizes.size(), 46u);
}

// Gated attention and the dense GLU MLP, joined by ordinary residual connections.
TEST(GradientCheck, DenseModelEveryGroup) {
  GradientCheck gc(config("dense-tiny.json"));
  EXPECT_EQ(check_every_group(gc).skipped, 0);
}

// The vision tower (patch and position embeddings, two blocks of attention both ways and a GELU
// MLP, the 2×2 merge, the projector) feeding a dense model through two images' placeholders.
TEST(GradientCheck, VisionTowerEveryGroup) {
  ModelConfig c = config("dense-tiny.json");
  const ModelConfig v = config("k3-nano-vision.json");
  c.media_placeholder_token_id = v.media_placeholder_token_id;
  c.vt_hidden_size = v.vt_hidden_size;
  c.vt_intermediate_size = v.vt_intermediate_size;
  c.vt_num_attention_heads = v.vt_num_attention_heads;
  c.vt_num_hidden_layers = v.vt_num_hidden_layers;
  c.vt_qkv_hidden_size = v.vt_qkv_hidden_size;
  c.vt_patch_size = v.vt_patch_size;
  c.vt_image_size = v.vt_image_size;
  c.vt_pos_emb_height = v.vt_pos_emb_height;
  c.vt_pos_emb_width = v.vt_pos_emb_width;
  GradientCheck gc(c);
  EXPECT_GE(gc.model().params().find("mm_projector.proj.2.weight"), 0);
  EXPECT_EQ(check_every_group(gc).skipped, 0);
}

// The same joined by Attention Residuals: 5 layers in blocks of 2.
TEST(GradientCheck, AttnResStackEveryGroup) {
  ModelConfig c = config("dense-tiny.json");
  c.num_hidden_layers = 5;
  c.attn_res_block_size = 2;
  GradientCheck gc(c);
  EXPECT_GE(gc.model().params().find("model.layers.3.mlp_res_proj.weight"), 0);
  EXPECT_EQ(check_every_group(gc).skipped, 0);
}

// At init (std 0.02) a token's sigmoid router scores lie within a few hundredths of each other,
// so the smallest step reorders some, and the routed experts' output (through an output
// projection of std 0.02/4) is too small for the router's gradient to stand above the loss noise.
// Ten times wider scores keep most steps inside one routing; a ten times larger routed output
// makes the router's slopes some 30 times the tolerance's noise term along its gradient's signs.
void widen_routing(Model& m, const char* routed_output) {
  ParamRegistry& p = m.params();
  for (int i = 0; i < p.size(); ++i)
    for (const char* role : {R"(\.block_sparse_moe\.gate\.weight$)", routed_output})
      if (std::regex_search(p.info(i).name, std::regex(role)))
        for (float& w : std::span(p.value(i).f32(), static_cast<size_t>(p.info(i).numel())))
          w *= 10;
}

// KDA, gated MLA, the dense first layer, LatentMoE with a shared expert, Attention Residuals.
TEST(GradientCheck, K3NanoEveryGroup) {
  GradientCheck gc(config("k3-nano.json"));
  widen_routing(gc.model(), R"(\.routed_expert_up_proj\.weight$)");
  const Skips s = check_every_group(gc);
  EXPECT_LE(s.skipped * 10, s.checked + s.skipped) << "more than 10% of the draws skipped";
}

// The K2-style baseline: gated MLA in every layer, the dense first layer, the standard MoE (the
// experts on x itself) with a shared expert and the bias balancer, ordinary residuals, SiLU.
TEST(GradientCheck, K2NanoEveryGroup) {
  GradientCheck gc(config("k2-nano.json"));
  EXPECT_LT(
      gc.model().params().find("model.layers.1.block_sparse_moe.routed_expert_up_proj.weight"), 0);
  widen_routing(gc.model(), R"(\.experts\.\d+\.w2\.weight$)");
  const Skips s = check_every_group(gc);
  EXPECT_LE(s.skipped * 10, s.checked + s.skipped) << "more than 10% of the draws skipped";
}

// Llama as released: grouped-query attention with rotary embeddings (Llama 3's scaled
// frequencies) and no gate, SwiGLU, plain residuals.
TEST(GradientCheck, LlamaNanoEveryGroup) {
  GradientCheck gc(config("llama-nano.json"));
  EXPECT_EQ(check_every_group(gc).skipped, 0);
}

// DeepSeek-V3 as released: MLA with rotary q_r and k_r and no gate, the dense first layer, the
// standard MoE with a shared expert, the bias balancer and routed_scaling_factor 2.5.
TEST(GradientCheck, DeepSeekV3NanoEveryGroup) {
  GradientCheck gc(config("deepseek-v3-nano.json"));
  widen_routing(gc.model(), R"(\.experts\.\d+\.w2\.weight$)");
  const Skips s = check_every_group(gc);
  EXPECT_LE(s.skipped * 10, s.checked + s.skipped) << "more than 10% of the draws skipped";
}

// K3's one-at-a-time ablations (common/ablations.h): k3-nano with one component swapped for its
// K2-style counterpart, in the combinations neither k3-nano nor k2-nano has: gated MLA in every
// layer under Attention Residuals with LatentMoE; KDA under plain residuals; the standard MoE under
// Quantile Balancing; LatentMoE under the bias balancer; KDA, MLA and LatentMoE with SwiGLU.
class GradientCheckAblation : public ::testing::TestWithParam<testing::Ablation> {};

// Each ablation changes its own fields of k3-nano and no other.
TEST(GradientCheck, AblationsChangeTheirOwnFieldsOnly) {
  const nlohmann::json k3 = model_config_to_json(config("k3-nano.json")).flatten();
  for (const testing::Ablation& a : testing::ablations()) {
    const nlohmann::json j = model_config_to_json(testing::k3_nano_ablation(a.name)).flatten();
    std::set<std::string> changed;
    for (const auto& [key, value] : j.items())
      if (!k3.contains(key) || k3[key] != value) changed.insert(key.substr(1));  // "/a/b"
    for (const auto& [key, value] : k3.items())
      if (!j.contains(key)) changed.insert(key.substr(1));
    for (const std::string& key : changed) {
      const bool own = std::any_of(a.fields.begin(), a.fields.end(), [&](std::string f) {
        std::replace(f.begin(), f.end(), '.', '/');
        return f.ends_with('/') ? key.starts_with(f) : key == f;
      });
      EXPECT_TRUE(own) << a.name << " changes " << key;
    }
    std::string first = a.fields.front();
    std::replace(first.begin(), first.end(), '.', '/');
    EXPECT_TRUE(std::any_of(changed.begin(), changed.end(),
                            [&](const std::string& k) { return k.starts_with(first); }))
        << a.name << " leaves " << a.fields.front() << " as it was";
  }
}

TEST_P(GradientCheckAblation, EveryGroup) {
  GradientCheck gc(testing::k3_nano_ablation(GetParam().name));
  widen_routing(gc.model(), gc.model().config().moe_latent ? R"(\.routed_expert_up_proj\.weight$)"
                                                           : R"(\.experts\.\d+\.w2\.weight$)");
  const Skips s = check_every_group(gc);
  EXPECT_LE(s.skipped * 10, s.checked + s.skipped) << "more than 10% of the draws skipped";
}

INSTANTIATE_TEST_SUITE_P(K3Nano, GradientCheckAblation, ::testing::ValuesIn(testing::ablations()),
                         [](const ::testing::TestParamInfo<testing::Ablation>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace k3::model::gradient_check_test
