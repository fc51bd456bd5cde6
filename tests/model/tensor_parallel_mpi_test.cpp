// Every tensor-parallel layer against the unsplit one, under mpirun -np 2 and 4 (tp = the whole
// job; skipped in one process), with and without sequence parallelism. Each rank builds the
// unsplit layer itself, in one process, and its own shard of the split one from the same seed,
// runs both forward and backward on the same input and output gradient, and compares: its rows
// of the output and of the input gradient, and every gradient (its shard's slice of the unsplit
// one; summed over tp first where the registry marks it so).
//
// Tolerance: 1e-5 of each tensor's largest entry (fp32; the split layer adds the ranks' partial
// sums in another order than one process). The collectives each region runs are counted: one per
// end and direction, plus a regather of the input in the backward under sequence parallelism.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/ablations.h"
#include "common/test_util.h"
#include "common/tp_util.h"
#include "k3/dist/grid.h"
#include "k3/model/layers/gated_attention.h"
#include "k3/model/layers/kda.h"
#include "k3/model/layers/latent_moe.h"
#include "k3/model/layers/mla.h"
#include "k3/model/layers/mlp.h"
#include "k3/model/layers/tp_region.h"
#include "k3/model/layers/vocab_parallel.h"
#include "k3/model/model.h"

namespace k3::model::tensor_parallel_mpi_test {
namespace {

using k3::testing::max_rel_error;
using k3::testing::random_vec;

constexpr int64_t kB = 2, kT = 8, kN = kB * kT;  // 16 tokens split over 2 and 4
constexpr double kTol = 1e-5;

ModelConfig nano() {
  return load_model_config(k3::testing::source_dir() + "/configs/k3-nano.json");
}
ModelConfig dense() {
  return load_model_config(k3::testing::source_dir() + "/configs/dense-tiny.json");
}
ModelConfig config(const std::string& name) {
  return load_model_config(k3::testing::source_dir() + "/configs/" + name);
}

class TensorParallelLayers : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (world.size() == 1) GTEST_SKIP() << "runs under mpirun -np 2 and 4";
  }
  bool sp() const { return GetParam(); }
  int tp() const { return world.size(); }
  int64_t rows() const { return sp() ? kN / tp() : kN; }
  int64_t first_row() const { return sp() ? world.rank() * rows() : 0; }

  // What one layer does on one side: forward x (this side's rows) into out, then backward dout
  // into dx.
  using Run =
      std::function<void(const Step&, const float* x, const float* dout, float* out, float* dx)>;
  using Make = std::function<Run(ParamRegistry&)>;

  // Runs `make`'s layer unsplit and split, compares, and returns the split side's tp counters.
  dist::Counters compare(const char* what, int64_t width, const Make& make) {
    const std::vector<float> x = random_vec(kN * width, 11), dout = random_vec(kN * width, 12);
    ParamRegistry whole, split(places_of(grid));
    std::vector<float> want(kN * width), want_dx(kN * width);
    {
      const Run run = make(whole);
      whole.allocate();
      whole.initialize(5);
      Arena arena(size_t{64} << 20, false);
      activation::ActivationManager acts;
      run(Step{arena, acts, whole, true}, x.data(), dout.data(), want.data(), want_dx.data());
    }
    const int64_t at = first_row() * width, n = rows() * width;
    std::vector<float> out(n), dx(n);
    const dist::Counters before = grid.tp().counters();
    {
      const Run run = make(split);
      split.allocate();
      split.initialize(5);
      Arena arena(size_t{64} << 20, false);
      activation::ActivationManager acts;
      run(Step{arena, acts, split, true, grid, 0, sp()}, x.data() + at, dout.data() + at,
          out.data(), dx.data());
    }
    dist::Counters moved = grid.tp().counters();
    for (size_t op = 0; op < moved.ops.size(); ++op) moved.ops[op].calls -= before.ops[op].calls;
    const double e_out = max_rel_error(out.data(), want.data() + at, n);
    const double e_dx = max_rel_error(dx.data(), want_dx.data() + at, n);
    EXPECT_LT(e_out, kTol) << what << ": output";
    EXPECT_LT(e_dx, kTol) << what << ": input gradient";
    const double e_grad = k3::testing::compare_grads(split, whole, grid.tp(), kTol);
    if (world.rank() == 0)
      std::printf("%-14s tp%d%s: output %.2g, input gradient %.2g, parameter gradients %.2g\n",
                  what, tp(), sp() ? " sp" : "", e_out, e_dx, e_grad);
    return moved;
  }

  // The calls of one region (forward and backward), and `extra` all-reduces inside it.
  void expect_region_calls(const dist::Counters& c, int extra_all_reduces) const {
    if (sp()) {
      EXPECT_EQ(c[dist::Op::all_gather].calls, 3);  // x, then dout and x again in the backward
      EXPECT_EQ(c[dist::Op::reduce_scatter].calls, 2);
      EXPECT_EQ(c[dist::Op::all_reduce].calls, extra_all_reduces);
    } else {
      EXPECT_EQ(c[dist::Op::all_gather].calls, 0);
      EXPECT_EQ(c[dist::Op::reduce_scatter].calls, 0);
      EXPECT_EQ(c[dist::Op::all_reduce].calls, 2 + extra_all_reduces);
    }
  }

  // A sequence mixer or feed-forward block as a Run.
  template <typename M>
  static Make mixer(std::function<M(ParamRegistry&)> build) {
    return [build](ParamRegistry& reg) -> Run {
      auto m = std::make_shared<M>(build(reg));
      return [m](const Step& s, const float* x, const float* dout, float* out, float* dx) {
        m->forward(s, x, {kB, kT}, out);
        m->backward(s, dout, {kB, kT}, dx);
      };
    };
  }
  template <typename F>
  static Make ffn(std::function<F(ParamRegistry&)> build) {
    return [build](ParamRegistry& reg) -> Run {
      auto f = std::make_shared<F>(build(reg));
      return [f](const Step& s, const float* x, const float* dout, float* out, float* dx) {
        f->forward(s, x, kN, out);
        f->backward(s, dout, kN, dx);
      };
    };
  }

  dist::Comm world = dist::Comm::world();
  dist::ProcessGrid grid{dist::ParallelDims{.tp = world.size(), .sequence_parallel = GetParam()},
                         world};
};

TEST_P(TensorParallelLayers, GatedAttentionSplitsByHeads) {
  const ModelConfig c = dense();
  expect_region_calls(
      compare("attention", c.hidden_size, mixer<GatedAttention>([&](ParamRegistry& reg) {
                return GatedAttention(reg, "attn", c);
              })),
      0);
}

// Llama's form: 8 query heads on 4 of keys and values, both split (rank r holds query heads
// 8r/tp.. and the key-value heads they read), rotary embeddings, no gate.
TEST_P(TensorParallelLayers, GroupedQueryAttentionSplitsBothHeadCounts) {
  const ModelConfig c = config("llama-nano.json");
  expect_region_calls(
      compare("grouped attention", c.hidden_size, mixer<GatedAttention>([&](ParamRegistry& reg) {
                return GatedAttention(reg, "attn", c);
              })),
      0);
}

// DeepSeek-V3's MLA: rotary q_r and k_r (k_r replicated, every rank turning it alike), no gate.
TEST_P(TensorParallelLayers, RotaryMlaSplitsByHeads) {
  const ModelConfig c = config("deepseek-v3-nano.json");
  expect_region_calls(compare("rotary mla", c.hidden_size, mixer<GatedMLA>([&](ParamRegistry& reg) {
                                return GatedMLA(reg, "mla", c);
                              })),
                      0);
}

TEST_P(TensorParallelLayers, GatedMlaSplitsByHeads) {
  const ModelConfig c = nano();
  expect_region_calls(compare("mla", c.hidden_size, mixer<GatedMLA>([&](ParamRegistry& reg) {
                                return GatedMLA(reg, "mla", c);
                              })),
                      0);
}

TEST_P(TensorParallelLayers, KdaSplitsByHeads) {
  const ModelConfig c = nano();
  expect_region_calls(
      compare("kda", c.hidden_size, mixer<KimiDeltaAttention>([&](ParamRegistry& reg) {
                return KimiDeltaAttention(reg, "kda", c);
              })),
      0);
}

TEST_P(TensorParallelLayers, MlpSplitsItsIntermediateFeatures) {
  const ModelConfig c = nano();
  expect_region_calls(compare("mlp", c.hidden_size, ffn<GluMlp>([&](ParamRegistry& reg) {
                                return GluMlp(reg, "mlp", c, c.intermediate_size);
                              })),
                      0);
}

// Routed experts split on each expert's intermediate dimension (ep = 1), shared experts too; one
// more all-reduce, of the routed experts' latent output, before the latent norm.
TEST_P(TensorParallelLayers, LatentMoeSplitsEveryExpert) {
  const ModelConfig c = nano();
  expect_region_calls(compare("latent moe", c.hidden_size, ffn<LatentMoE>([&](ParamRegistry& reg) {
                                return LatentMoE(reg, "moe", c);
                              })),
                      1);
}

// The standard MoE (k2-nano: experts on x itself) the same way; its one more all-reduce is of the
// routed output itself.
TEST_P(TensorParallelLayers, StandardMoeSplitsEveryExpert) {
  const ModelConfig c = load_model_config(k3::testing::source_dir() + "/configs/k2-nano.json");
  expect_region_calls(
      compare("standard moe", c.hidden_size,
              ffn<LatentMoE>([&](ParamRegistry& reg) { return LatentMoE(reg, "moe", c); })),
      1);
}

// The feed-forward blocks of k3-nano's ablations that change them (common/ablations.h): SwiGLU in
// the dense MLP and in LatentMoE's experts, and the standard MoE (experts on x) with SiTU-GLU.
TEST_P(TensorParallelLayers, AblatedFeedForwardsSplit) {
  for (const char* name : {"swiglu", "standard_moe"}) {
    const ModelConfig c = k3::testing::k3_nano_ablation(name);
    SCOPED_TRACE(name);
    if (c.hidden_act == "silu")
      expect_region_calls(compare("mlp swiglu", c.hidden_size, ffn<GluMlp>([&](ParamRegistry& reg) {
                                    return GluMlp(reg, "mlp", c, c.intermediate_size);
                                  })),
                          0);
    expect_region_calls(
        compare(c.moe_latent ? "moe swiglu" : "standard situ", c.hidden_size,
                ffn<LatentMoE>([&](ParamRegistry& reg) { return LatentMoE(reg, "moe", c); })),
        1);
  }
}

// The vocabulary-parallel embedding: its "input gradient" is the table's, compared as a
// parameter gradient; `dx` stays unused.
TEST_P(TensorParallelLayers, EmbeddingSplitsTheVocabulary) {
  const ModelConfig c = nano();
  const std::vector<int32_t> tokens = k3::testing::random_tokens(kN, 259, 13);
  compare("embedding", c.hidden_size, [&](ParamRegistry& reg) -> Run {
    auto e = std::make_shared<VocabEmbedding>(reg, "embed", c.vocab_size, c.hidden_size, 0.5f);
    return [e, tokens, &c](const Step& s, const float*, const float* dout, float* out, float* dx) {
      e->forward(s, tokens.data(), kN, out);
      e->backward(s, tokens.data(), kN, dout);
      std::fill(dx, dx + local_rows(s, kN) * c.hidden_size, 0.f);
    };
  });
}

// The vocabulary-parallel LM head and cross-entropy against the fused one: the same loss on
// every rank, the hidden states' gradient (this rank's rows), the head's gradient (its rows).
TEST_P(TensorParallelLayers, LmHeadLossMatchesTheFusedOne) {
  const ModelConfig c = nano();
  std::vector<int32_t> targets = k3::testing::random_tokens(kN, 259, 14);
  targets[3] = targets[9] = c.ignore_index;
  std::vector<double> losses;
  compare("lm head", c.hidden_size, [&](ParamRegistry& reg) -> Run {
    auto h = std::make_shared<LmHead>(reg, "head", c.vocab_size, c.hidden_size, 0.5f);
    return [&, h](const Step& s, const float* x, const float*, float* out, float* dx) {
      const kernels::LossSum l = h->loss(s, x, targets.data(), kN, c.ignore_index, 0.1f, dx);
      EXPECT_EQ(l.count, kN - 2);
      losses.push_back(l.sum);
      std::fill(out, out + local_rows(s, kN) * c.hidden_size, 0.f);
    };
  });
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_NEAR(losses[1], losses[0], 1e-6 * losses[0]);
}

// Whole logits from the split head, gathered (decoding and inspection).
TEST_P(TensorParallelLayers, LmHeadLogitsAreGatheredWhole) {
  const ModelConfig c = nano();
  const int64_t rows = 3;
  const std::vector<float> h = random_vec(rows * c.hidden_size, 15);
  ParamRegistry whole, split(places_of(grid));
  const LmHead a(whole, "head", c.vocab_size, c.hidden_size, 0.5f),
      b(split, "head", c.vocab_size, c.hidden_size, 0.5f);
  for (ParamRegistry* r : {&whole, &split}) {
    r->allocate();
    r->initialize(5);
  }
  Arena arena(size_t{16} << 20, false);
  activation::ActivationManager acts;
  std::vector<float> want(rows * c.vocab_size), got(want.size());
  a.logits(Step{arena, acts, whole, false}, h.data(), rows, want.data());
  b.logits(Step{arena, acts, split, false, grid}, h.data(), rows, got.data());
  EXPECT_LT(max_rel_error(got.data(), want.data(), rows * c.vocab_size), kTol);
}

INSTANTIATE_TEST_SUITE_P(Mpi, TensorParallelLayers, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "sequence_parallel" : "replicated_stream";
                         });

}  // namespace
}  // namespace k3::model::tensor_parallel_mpi_test
