// Training in bf16 (Model::set_precision, train.precision = "bf16"): one step's loss and gradients
// against fp32's on the same k3-micro model and batch, per tensor group. Both accumulate in fp32;
// bf16 rounds every product's operands to 8 significant bits (relative 2^-9), so each gradient
// moves by a fraction of a percent, more where errors pile up through the layers behind it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "common/model_util.h"
#include "common/test_util.h"
#include "k3/model/layer_factory.h"
#include "k3/model/model.h"

namespace k3::model {
namespace {

// The tensor groups compared: embedding, full attention (MLA), KDA, MoE (router, experts, shared
// experts), the first layer's dense MLP, the head (final norm, LM head), and the rest (the
// layers' norms and Attention Residuals' projections).
std::string group_of(const Model& m, const std::string& name) {
  if (name.find("embed_tokens") != std::string::npos) return "embedding";
  if (name.starts_with("lm_head") || name.starts_with("model.norm")) return "head";
  const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return "other";
  const int64_t layer = std::atoll(name.c_str() + prefix.size());
  if (name.find(".self_attn.") != std::string::npos)
    return m.layer_mixer(layer) == MixerKind::KDA ? "kda" : "attention";
  if (name.find(".block_sparse_moe.") != std::string::npos) return "moe";
  if (name.find(".mlp.") != std::string::npos) return "dense_mlp";
  return "other";
}

struct Comparison {
  double loss = 0;                      // relative difference of the summed loss
  std::map<std::string, double> grads;  // per group: ‖g_bf16 − g_fp32‖ / ‖g_fp32‖
};

Comparison bf16_against_fp32(uint64_t seed) {
  const ModelConfig c = load_model_config(testing::source_dir() + "/configs/k3-micro.json");
  const int64_t B = 2, T = 64;
  const std::vector<int32_t> tokens = testing::random_tokens(B * T, 259, seed + 100),
                             targets = testing::random_tokens(B * T, 259, seed + 200);
  std::vector<std::vector<float>> grads;
  std::vector<double> losses;
  Model* first = nullptr;
  std::vector<std::unique_ptr<Model>> models;
  for (kernels::Precision p : {kernels::Precision::F32, kernels::Precision::BF16}) {
    auto m = std::make_unique<Model>(c);
    m->initialize(seed);
    testing::spread_routers(*m);  // expert choices far from ties: the runs differ only in rounding
    m->set_precision(p);  // after the weights are final: refreshes the bf16 copy
    Arena arena{size_t{64} << 20, false};
    activation::ActivationManager acts;
    losses.push_back(
        m->forward_backward(arena, acts, {tokens.data(), targets.data(), B, T}, 1.0f / (B * T)).sum);
    grads.emplace_back(m->params().grads(), m->params().grads() + m->params().flat_size());
    if (!first) first = m.get();
    models.push_back(std::move(m));
  }
  Comparison out;
  out.loss = std::abs(losses[1] - losses[0]) / losses[0];
  std::map<std::string, std::pair<double, double>> sums;  // group: (Σ diff², Σ ref²)
  const ParamRegistry& reg = first->params();
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    auto& [diff, ref] = sums[group_of(*first, p.name)];
    for (int64_t j = 0; j < p.local_numel(); ++j) {
      const double r = grads[0][p.offset + j], b = grads[1][p.offset + j];
      diff += (b - r) * (b - r);
      ref += r * r;
    }
  }
  for (const auto& [g, s] : sums) out.grads[g] = std::sqrt(s.first / s.second);
  return out;
}

// Measured, seeds 1 and 2, native and with oneDNN held to AVX2 (where bf16 products run as fp32
// products of bf16-rounded operands), relative to fp32; the largest of the four runs, with the
// attention and KDA kernels' own products in bf16 too:
//   attention 0.0156, KDA 0.0220, MoE 0.0385, dense MLP 0.0221, embedding 0.0214, head 0.0134,
//   other 0.0231; the loss 4.4e-5
// (with those products in fp32: 0.0132, 0.0177, 0.0349, 0.0181, 0.0173, 0.0110, 0.0179; 6.3e-5).
// Each tolerance is about twice that. (dense-tiny, without MoE, KDA or Attention Residuals,
// measures 0.06-0.4%; k3-micro's gradients pass through more layers and the routers' top-k.) The
// lower bound catches a run that is not bf16 at all: fp32 against fp32 on another thread count
// or instruction set differs by ~1e-6.
TEST(Bf16Training, StepMatchesFp32PerTensorGroup) {
  const std::map<std::string, double> kTolerance = {
      {"embedding", 0.043}, {"attention", 0.031}, {"kda", 0.044}, {"moe", 0.077},
      {"dense_mlp", 0.044}, {"head", 0.027},      {"other", 0.046}};
  for (uint64_t seed : {1, 2}) {
    const Comparison c = bf16_against_fp32(seed);
    std::string report = "seed " + std::to_string(seed) + ": loss " + std::to_string(c.loss);
    for (const auto& [g, e] : c.grads) report += ", " + g + " " + std::to_string(e);
    std::printf("%s\n", report.c_str());
    EXPECT_LT(c.loss, 1.5e-4) << report;
    for (const auto& [g, e] : c.grads) {
      EXPECT_LT(e, kTolerance.at(g)) << g << ": " << report;
      EXPECT_GT(e, 1e-4) << g << " is not computed in bf16: " << report;
    }
  }
}

}  // namespace
}  // namespace k3::model
