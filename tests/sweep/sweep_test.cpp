#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "k3/base/error.h"
#include "k3/model/model.h"
#include "k3/sweep/compare.h"
#include "k3/sweep/jobs.h"
#include "k3/sweep/results.h"
#include "k3/sweep/shapes.h"
#include "k3/sweep/spec.h"

namespace k3::sweep {
namespace {

namespace fs = std::filesystem;

model::ModelConfig nano() {
  return model::load_model_config(std::string(K3LAB_SOURCE_DIR) + "/configs/k3-nano.json");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The K3 preset repeats KDA, KDA, KDA, MLA; at its own width the rule gives the preset back.
TEST(SweepShapes, ThePresetAtItsOwnWidthIsThePreset) {
  const model::ModelConfig c = nano();
  EXPECT_EQ(layer_period(c), 4);
  const ModelShape s = scale_preset(c, c.hidden_size);
  EXPECT_EQ(s.layers, c.num_hidden_layers);
  EXPECT_EQ(s.config.kda_layers, c.kda_layers);
  EXPECT_EQ(s.config.full_attn_layers, c.full_attn_layers);
  EXPECT_EQ(s.params, model::Model(c, false).matmul_params());
  model::ModelConfig all_mla = c;
  all_mla.kda_layers.clear();
  all_mla.full_attn_layers.clear();
  all_mla.kda_num_heads = 0;
  EXPECT_EQ(layer_period(all_mla), 1);
}

// Depth follows width at the preset's aspect ratio, in whole repeats of the pattern; widths scale.
TEST(SweepShapes, DepthAndWidthsFollowTheRule) {
  const model::ModelConfig c = nano();  // d 64, 8 layers: aspect 8, period 4
  const ModelShape half = scale_preset(c, 32), twice = scale_preset(c, 128);
  EXPECT_EQ(half.layers, 4);
  EXPECT_EQ(twice.layers, 16);
  EXPECT_EQ(half.config.intermediate_size, c.intermediate_size / 2);
  EXPECT_EQ(twice.config.num_attention_heads, 2 * c.num_attention_heads);
  EXPECT_EQ(twice.config.kda_num_heads, 2 * c.kda_num_heads);
  EXPECT_EQ(twice.config.qk_nope_head_dim, c.qk_nope_head_dim);  // head dims kept
  for (int64_t i = 1; i <= 16; ++i) {
    const bool full =
        std::find(twice.config.full_attn_layers.begin(), twice.config.full_attn_layers.end(), i) !=
        twice.config.full_attn_layers.end();
    EXPECT_EQ(full, i % 4 == 0) << "layer " << i;
  }
}

// The chosen shape is the nearest in log N of every width tried.
TEST(SweepShapes, ShapeForSizeIsTheNearest) {
  const model::ModelConfig c = nano();
  for (double target : {2e4, 5e4, 3e5}) {
    const ModelShape s = shape_for_size(c, target);
    for (int64_t d = 8; d <= 96; d += 8) {
      const ModelShape o = scale_preset(c, d);
      EXPECT_LE(std::abs(std::log(s.params / target)),
                std::abs(std::log(o.params / target)) + 1e-12)
          << "target " << target << ", width " << d;
    }
  }
}

// A line through the last quarter is read exactly at the last step; short curves give the last.
TEST(SweepResults, SmoothedFinalFollowsTheLastQuarter) {
  train::MetricSeries c;
  for (int64_t s = 10; s <= 120; s += 10) {
    c.steps.push_back(static_cast<double>(s));
    c.values.push_back(s <= 80 ? 9.0 : 3.0 - 0.01 * static_cast<double>(s));
  }
  EXPECT_NEAR(smoothed_final(c), 3.0 - 1.2, 1e-12);
  c.values.back() += 0.3;  // one noisy evaluation moves the smoothed value by a fraction of it
  EXPECT_GT(smoothed_final(c), 1.8);
  EXPECT_LT(smoothed_final(c), 1.8 + 0.3);
  train::MetricSeries two{{5, 10}, {2.0, 1.5}};
  EXPECT_EQ(smoothed_final(two), 1.5);
}

// The frontier's inverse, and the multiplier between two laws of known ratio: an arm whose
// A is k^alpha times larger needs exactly k times the compute for any loss.
TEST(SweepCompare, ComputeForLossInvertsTheFrontier) {
  using scaling::LawForm;
  const scaling::ScalingLaw c_form{LawForm::kCompute, 0.7, 50.0, 0, 0.3, 0};
  for (double C : {1e9, 1e12, 1e15})
    EXPECT_NEAR(compute_for_loss(c_form, frontier_loss(c_form, C)) / C, 1.0, 1e-9);
  EXPECT_TRUE(std::isinf(compute_for_loss(c_form, 0.7)));
  const scaling::ScalingLaw nd{LawForm::kParamsTokens, 1.69, 406.4, 410.7, 0.34, 0.28};
  for (double C : {1e18, 1e21})
    EXPECT_NEAR(compute_for_loss(nd, frontier_loss(nd, C)) / C, 1.0, 1e-9);
  scaling::ScalingLaw slower = c_form;
  slower.A *= std::pow(3.0, c_form.alpha);
  for (double loss : {1.0, 2.0})
    EXPECT_NEAR(compute_for_loss(slower, loss) / compute_for_loss(c_form, loss), 3.0, 1e-9);
}

SweepSpec spec_of(const std::string& body) {
  return parse_sweep_spec(body, std::string(K3LAB_SOURCE_DIR) + "/configs/sweeps/test.toml");
}
const char* kArm = "[[arm]]\nname = \"a\"\npreset = \"../k3-nano.json\"\n";

TEST(SweepSpec, ReadsTheFileAndRefusesMistakesNamingTheKey) {
  const SweepSpec s = spec_of(
      "[sweep]\nout = \"x\"\nsizes = [1e4, 2e4]\ntokens_per_param = 20\nlr = [1e-3, 2e-3]\n"
      "[set]\ndata.seq_len = 64\n\"train.schedule\" = \"wsd\"\n" +
      std::string(kArm) + "set = { train.warmup_fraction = 0.1 }\n");
  EXPECT_EQ(s.name, "test");
  EXPECT_EQ(s.sizes, (std::vector<double>{1e4, 2e4}));
  ASSERT_EQ(s.settings.size(), 2u);
  EXPECT_EQ(s.settings[0], (std::pair<std::string, std::string>{"data.seq_len", "64"}));
  EXPECT_EQ(s.settings[1].second, "\"wsd\"");
  ASSERT_EQ(s.arms.size(), 1u);
  EXPECT_EQ(s.arms[0].settings[0].first, "train.warmup_fraction");
  EXPECT_TRUE(fs::exists(s.arms[0].preset));

  const std::string ok = "[sweep]\nout = \"x\"\nsizes = [1e4]\ntokens_per_param = 20\nlr = 1e-3\n";
  EXPECT_FALSE(s.parallel);  // "auto" unless given
  EXPECT_FALSE(spec_of(ok + "threads = \"auto\"\n" + kArm).threads);
  EXPECT_EQ(spec_of(ok + "parallel = 3\nthreads = 2\n" + kArm).parallel, 3);
  for (const char* bad : {"0", "-1", "1.5", "\"fast\"", "[2]"})
    for (const char* key : {"parallel", "threads"})
      EXPECT_TRUE(error_of([&] { spec_of(ok + key + " = " + bad + "\n" + kArm); })
                      .ends_with(std::string("test.toml, field sweep.") + key +
                                 ": expected a positive integer or \"auto\", found " +
                                 (bad[0] == '[' ? "array" : bad)))
          << key << " = " << bad;
  EXPECT_NE(error_of([&] { spec_of(ok + "colour = 1\n" + kArm); }).find("sweep.colour"),
            std::string::npos);
  EXPECT_NE(error_of([&] { spec_of(ok); }).find("[[arm]]"), std::string::npos);
  EXPECT_NE(error_of([&] { spec_of(ok + "flops = [1e12]\n" + kArm); }).find("exactly one"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        spec_of("[sweep]\nout = \"x\"\nsizes = [1e4, 1e4]\ntokens_per_param = 1\nlr = 1e-3\n" +
                std::string(kArm));
      }).find("listed twice"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              spec_of(ok + "[[arm]]\nname = \"a\"\npreset = \"nope.json\"\n");
            }).find("no such file: nope.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              plan_jobs(spec_of(ok + "[set]\ntrain.lr = 1\n" + kArm));
            }).find("set.train.lr"),
            std::string::npos);
}

// Budgets: D = r N rounded to whole steps; FLOPs by 6ND and by the model's own count.
TEST(SweepJobs, TokensStepsAndFlops) {
  const SweepSpec s = spec_of(
      "[sweep]\nout = \"/tmp/k3-sweep-test\"\nsizes = [2e4, 8e4]\ntokens_per_param = 10\n"
      "lr = [1e-3, 3e-3]\nevals = 4\n[set]\ndata.seq_len = 32\ntrain.batch_size = 4\n" +
      std::string(kArm));
  const std::vector<Job> jobs = plan_jobs(s);
  ASSERT_EQ(jobs.size(), 4u);
  for (const Job& j : jobs) {
    EXPECT_EQ(j.tokens, j.steps * 4 * 32);
    EXPECT_LE(std::abs(static_cast<double>(j.tokens) - 10.0 * j.shape.params), 64);
    EXPECT_DOUBLE_EQ(j.flops_6nd, 6.0 * j.shape.params * j.tokens);
    EXPECT_GT(j.flops_exact, j.flops_6nd);  // attention and KDA add to the matrix products
    EXPECT_EQ(j.config.eval.every, (j.steps + 3) / 4);
    EXPECT_EQ(j.config.train.steps, j.steps);
    EXPECT_EQ(j.config.run.dir, j.dir("/tmp/k3-sweep-test") + "/run");
  }
  EXPECT_LT(jobs[0].shape.params, jobs[2].shape.params);  // smaller models first
  EXPECT_EQ(jobs[0].id, "a-n20000-tpp10-lr0.001-b4-s1234");
}

}  // namespace
}  // namespace k3::sweep
