// The whole model under tensor parallelism against one process, under mpirun -np 2 and 4 (tp =
// the whole job; skipped in one process), with and without sequence parallelism: k3-nano (KDA,
// gated MLA, LatentMoE with a shared expert, Attention Residuals), the dense model (gated
// attention, GLU MLP), the families as released (llama-nano: grouped-query attention, its query
// and key-value heads both split, and rotary embeddings; deepseek-v3-nano: MLA with rotary q_r and
// k_r and no gate, the standard MoE), and the ablations of k3-nano whose switch changes what tp
// splits or sums (common/ablations.h: MLA in every layer, plain residuals, the standard MoE,
// SwiGLU), one sequence-parallel setting each. Each rank builds the one-process model itself.
//
// Compared: the loss of a training forward and every gradient (summed over tp where the registry
// marks it so: here, without the optimizer's reduction), the evaluation loss, the whole logits,
// decoding logits token by token, and two pipeline stages run one after the other. Tolerances:
// loss 1e-6 relative, logits 1e-5 and gradients 1e-3 of the tensor's largest entry (fp32, partial
// sums added in another order). Each split layer alone matches to ~3e-7
// (tensor_parallel_mpi_test.cpp); through eight layers the rounding grows most in KDA's A_log,
// whose gradient sums terms of both signs over every token and channel of a head (measured: up to
// 3.3e-4 at tp4; the next tensor 3.6e-5), as perturbing one process's weights by 1e-7 relative
// moves one process's own gradients by up to 1.9e-4. The routers are spread
// (common/model_util.h), so no routing choice sits within rounding of a tie. A missing or doubled
// sum moves a gradient by its own size.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/ablations.h"
#include "common/model_util.h"
#include "common/test_util.h"
#include "common/tp_util.h"
#include "k3/dist/grid.h"
#include "k3/model/model.h"

namespace k3::model::tp_model_mpi_test {
namespace {

using k3::testing::max_rel_error;

constexpr int64_t kB = 2, kT = 8;
constexpr double kGradTol = 1e-3;

ModelConfig config(const std::string& name) {
  return load_model_config(k3::testing::source_dir() + "/configs/" + name + ".json");
}

struct Setup {
  const char* model;
  bool sp;
  const char* ablation = nullptr;  // of k3-nano (common/ablations.h)
};

ModelConfig config(const Setup& s) {
  return s.ablation ? k3::testing::k3_nano_ablation(s.ablation) : config(s.model);
}

class TensorParallelModel : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    if (world.size() == 1) GTEST_SKIP() << "runs under mpirun -np 2 and 4";
    whole = std::make_unique<Model>(config(GetParam()));
    split = std::make_unique<Model>(config(GetParam()), true, grid);
    for (Model* m : {whole.get(), split.get()}) {
      m->initialize(7);
      k3::testing::perturb_attn_res(*m);
      k3::testing::spread_routers(*m);
    }
    tokens = k3::testing::random_tokens(kB * kT, 259, 3);
    targets = k3::testing::random_tokens(kB * kT, 259, 4);
    targets[5] = targets[11] = whole->config().ignore_index;
  }
  TokenBatch batch() const { return {tokens.data(), targets.data(), kB, kT}; }
  std::string what() const {
    const char* ablation = GetParam().ablation;
    return std::string(GetParam().model) + (ablation ? std::string(" ") + ablation : "") + " tp" +
           std::to_string(world.size()) + (GetParam().sp ? " sp" : "");
  }

  dist::Comm world = dist::Comm::world();
  dist::ProcessGrid grid{dist::ParallelDims{.tp = world.size(), .sequence_parallel = GetParam().sp},
                         world};
  std::unique_ptr<Model> whole, split;
  std::vector<int32_t> tokens, targets;
  Arena arena{size_t{256} << 20, false};
  activation::ActivationManager acts;
};

TEST_P(TensorParallelModel, LossAndEveryGradient) {
  const kernels::LossSum want = whole->forward_backward(arena, acts, batch(), 0.05f);
  const kernels::LossSum got = split->forward_backward(arena, acts, batch(), 0.05f);
  EXPECT_EQ(got.count, want.count);
  EXPECT_NEAR(got.sum, want.sum, 1e-6 * want.sum);
  const double worst =
      k3::testing::compare_grads(split->params(), whole->params(), grid.tp(), kGradTol);
  if (world.rank() == 0)
    std::printf("%s: loss %.3g relative, max gradient error %.3g\n", what().c_str(),
                std::abs(got.sum - want.sum) / want.sum, worst);
}

TEST_P(TensorParallelModel, EvaluationLossAndLogits) {
  const kernels::LossSum want = whole->forward_loss(arena, batch());
  const kernels::LossSum got = split->forward_loss(arena, batch());
  EXPECT_NEAR(got.sum, want.sum, 1e-6 * want.sum);
  const int64_t V = whole->config().vocab_size;
  std::vector<float> a(kB * kT * V), b(a.size());
  whole->forward_logits(arena, tokens.data(), kB, kT, a.data());
  split->forward_logits(arena, tokens.data(), kB, kT, b.data());
  EXPECT_LT(max_rel_error(b.data(), a.data(), static_cast<int64_t>(a.size())), 1e-5);
}

// A prompt of three tokens, then one token at a time.
TEST_P(TensorParallelModel, DecodingLogits) {
  const int64_t V = whole->config().vocab_size;
  ModelCache ca = whole->make_cache(16), cb = split->make_cache(16);
  std::vector<float> a(V), b(V);
  for (int64_t at = 0; at < 6; at += at == 0 ? 3 : 1) {
    const int64_t n = at == 0 ? 3 : 1;
    whole->decode(arena, ca, tokens.data() + at, n, a.data());
    split->decode(arena, cb, tokens.data() + at, n, b.data());
    EXPECT_LT(max_rel_error(b.data(), a.data(), V), 1e-5) << "after token " << at + n;
  }
}

// Layers [0, L/2) then [L/2, L): the payload between them holds this rank's rows only under
// sequence parallelism; together the stages give the whole model's loss and gradients.
TEST_P(TensorParallelModel, PipelineStagesRunOneAfterTheOther) {
  const kernels::LossSum want = whole->forward_backward(arena, acts, batch(), 0.05f);
  const int64_t L = split->config().num_hidden_layers, cut = L / 2;
  const Stage first{0, cut, true, false}, second{cut, L, false, true};
  std::vector<float> payload(split->payload_floats(cut, kB * kT)), grad(payload.size());
  ArenaScope scope(arena);
  const MicroBatch mb{0, arena, acts};
  split->forward_stage(mb, first, batch(), 0.05f, nullptr, payload.data());
  const kernels::LossSum got =
      split->forward_stage({1, arena, acts}, second, batch(), 0.05f, payload.data(), nullptr);
  split->backward_stage({1, arena, acts}, second, batch(), nullptr, grad.data());
  split->backward_stage(mb, first, batch(), grad.data(), nullptr);
  EXPECT_NEAR(got.sum, want.sum, 1e-6 * want.sum);
  k3::testing::compare_grads(split->params(), whole->params(), grid.tp(), kGradTol);
}

// A head count (of queries, or of keys and values), a KDA head count or an intermediate size that
// does not split is refused in one line naming the field and the group size.
TEST(TensorParallelModelMpi, RefusesSizesThatDoNotSplit) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() == 1) GTEST_SKIP() << "runs under mpirun";
  const dist::ProcessGrid grid(dist::ParallelDims{.tp = world.size()}, world);
  const std::string size = std::to_string(world.size());
  struct Case {
    const char* field;
    void (*spoil)(ModelConfig&);
    const char* model = "k3-nano";
  };
  for (const Case& k :
       {Case{"vocab_size", [](ModelConfig& c) { c.vocab_size = 259; }},
        Case{"num_attention_heads", [](ModelConfig& c) { c.num_attention_heads = 3; }},
        Case{"linear_attn_config.num_heads", [](ModelConfig& c) { c.kda_num_heads = 3; }},
        Case{"intermediate_size", [](ModelConfig& c) { c.intermediate_size = 129; }},
        Case{"moe_intermediate_size", [](ModelConfig& c) { c.moe_intermediate_size = 33; }},
        Case{"num_key_value_heads", [](ModelConfig& c) { c.num_key_value_heads = 1; },
             "llama-nano"}}) {
    ModelConfig c = config(k.model);
    k.spoil(c);
    const std::string message = k3::testing::error_of([&] { Model m(c, false, grid); });
    EXPECT_NE(message.find(k.field), std::string::npos) << k.field << ": " << message;
    EXPECT_NE(message.find("size " + size), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Mpi, TensorParallelModel,
    ::testing::Values(Setup{"k3-nano", false}, Setup{"k3-nano", true}, Setup{"dense-tiny", false},
                      Setup{"dense-tiny", true}, Setup{"llama-nano", false},
                      Setup{"llama-nano", true}, Setup{"deepseek-v3-nano", false},
                      Setup{"deepseek-v3-nano", true}, Setup{"k3-nano", true, "mla_only"},
                      Setup{"k3-nano", false, "plain_residuals"},
                      Setup{"k3-nano", true, "standard_moe"}, Setup{"k3-nano", false, "swiglu"}),
    [](const ::testing::TestParamInfo<Setup>& p) {
      std::string n = std::string(p.param.model) +
                      (p.param.ablation ? std::string("_") + p.param.ablation : "") +
                      (p.param.sp ? "_sp" : "");
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace k3::model::tp_model_mpi_test
