// The activation estimate against the measured peak over one forward_backward: the step arena's
// and the activation manager's pool's.
#include "k3/model/memory_estimate.h"

#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"

namespace k3::model::memory_estimate_test {
namespace {

ModelConfig config(const std::string& name) {
  return load_model_config(testing::source_dir() + "/configs/" + name);
}

size_t measured_peak(const ModelConfig& c, int64_t B, int64_t T) {
  testing::ScopedThreads one(
      1);  // the arena does not depend on it; a busy machine makes threads wait
  Model m(c);
  m.initialize(7);
  Arena arena(size_t{1} << 30, /*prefault=*/false);
  activation::ActivationManager acts;
  const auto tokens =
      testing::random_tokens(static_cast<size_t>(B * T), static_cast<int32_t>(c.vocab_size), 1);
  const auto targets =
      testing::random_tokens(static_cast<size_t>(B * T), static_cast<int32_t>(c.vocab_size), 2);
  m.forward_backward(arena, acts, {tokens.data(), targets.data(), B, T}, 1.0f);
  // The arena holds the stream and scratch; the manager's pool what is kept for the backward.
  return arena.peak() + acts.stats().stored_peak;
}

// The estimate is an upper bound, and a close one: within 5% of the peak. (The measure adds the
// arena's peak and the pool's, which can come at different moments of the step, so it may pass
// the true peak the estimate bounds by a little: 2% is allowed.)
void expect_close_bound(const ModelConfig& c, int64_t B, int64_t T, const std::string& what) {
  const double peak = static_cast<double>(measured_peak(c, B, T)),
               estimate = activation_bytes(c, B, T);
  EXPECT_GE(estimate, 0.98 * peak) << what;
  EXPECT_LE(estimate, 1.05 * peak) << what;
}

TEST(MemoryEstimate, ActivationsBoundTheStepArenaPeakOfEveryLayerKind) {
  // Gated attention and the dense MLP.
  expect_close_bound(config("dense-tiny.json"), 4, 32, "dense-tiny");
  // KDA (T not a multiple of its 64-token chunks), gated MLA, LatentMoE, Attention Residuals.
  expect_close_bound(config("k3-micro.json"), 2, 100, "k3-micro");
  // Plain gated attention beside KDA, ordinary residuals, a MoE without shared experts.
  ModelConfig plain = config("k3-micro.json");
  plain.q_lora_rank = 0;
  plain.head_dim = 32;
  plain.attn_res_block_size = 0;
  plain.num_shared_experts = 0;
  expect_close_bound(plain, 3, 64, "k3-micro, plain attention");
  // The K2-style baseline: MLA in every layer, the standard MoE (no latent space), SiLU.
  expect_close_bound(config("k2-nano.json"), 2, 64, "k2-nano");
  // The families as released: grouped-query attention with rotary embeddings and no gate (its
  // keys and values repeated over the groups in the backward); MLA without the gate.
  expect_close_bound(config("llama-nano.json"), 2, 64, "llama-nano");
  expect_close_bound(config("deepseek-v3-nano.json"), 2, 64, "deepseek-v3-nano");
  // Attention Residuals with a block per layer: the most mixing weights.
  ModelConfig blocks = config("dense-tiny.json");
  blocks.attn_res_block_size = 1;
  blocks.num_hidden_layers = 4;
  expect_close_bound(blocks, 2, 48, "dense-tiny, a block per layer");
}

TEST(MemoryEstimate, ParametersAndGradientsAreTheFlatBuffers) {
  const Model described(config("k3-micro.json"), /*allocate=*/false);
  const ModelMemory m = model_memory(described, {});
  EXPECT_EQ(m.parameters, described.params().total_numel());
  EXPECT_EQ(m.parameter_bytes, static_cast<double>(described.params().flat_size()) * 4);
  EXPECT_EQ(m.gradient_bytes, m.parameter_bytes);
  // Activations grow linearly with the tokens of a micro-batch (beyond the fixed LM-head chunk).
  EXPECT_GT(activation_bytes(described.config(), 8, 128),
            1.9 * activation_bytes(described.config(), 4, 128));
}

}  // namespace
}  // namespace k3::model::memory_estimate_test
