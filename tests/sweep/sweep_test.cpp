#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
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

// Scaled shapes read back as they were written (a job's model.json): MLA's heads keep their own
// keys and values, Llama's keep their group of two query heads to a key-value head, and a head
// count the group does not divide gives every head its own.
TEST(SweepShapes, KeyValueHeadsFollowTheHeads) {
  const model::ModelConfig llama =
      model::load_model_config(testing::source_dir() + "/configs/llama-nano.json");  // 8 heads on 4
  for (auto [preset, hidden, heads, kv] :
       {std::tuple{nano(), 128, 8, 8}, {llama, 128, 16, 8}, {llama, 24, 3, 3}}) {
    const ModelShape s = scale_preset(preset, hidden);
    EXPECT_EQ(s.config.num_attention_heads, heads);
    EXPECT_EQ(s.config.num_key_value_heads, kv);
    EXPECT_EQ(error_of([&] {
                model::parse_model_config(model::model_config_to_json(s.config), "model.json");
              }),
              "");
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

// A sweep's table made by hand, without training: every job finished with the loss given.
struct HandTable {
  std::vector<Job> jobs;
  std::vector<JobResult> results;
  // ARM at size N with D = 10 N tokens, learning rate LR and seed SEED.
  void add(const std::string& arm, double n, double lr, int64_t seed, double loss,
           int64_t batch_size = 8) {
    Job j;
    j.arm = arm;
    j.target = n;
    j.budget = 10;
    j.shape.params = static_cast<int64_t>(n);
    j.tokens = static_cast<int64_t>(10 * n);
    j.lr = lr;
    j.batch_size = batch_size;
    j.seed = seed;
    jobs.push_back(j);
    JobResult r;
    r.status = "done";
    r.val_loss = loss;
    results.push_back(r);
  }
};

// The law of the first arms below, L(C) = 1 + 2000 / C^0.3, at sizes whose C = 6 N (10 N).
const scaling::ScalingLaw kHandLaw{scaling::LawForm::kCompute, 1.0, 2000.0, 0, 0.3, 0};
const double kHandSizes[] = {1e4, 3e4, 1e5, 3e5};
double hand_compute(double n) { return 60.0 * n * n; }
double hand_loss(double compute) { return kHandLaw.loss_at_compute(compute); }

// An arm on the law at every size, its best lr (2e-3) on it and the others 0.05 above.
void add_law_arm(HandTable& t, const std::string& arm, double compute_factor = 1) {
  for (double n : kHandSizes)
    for (double lr : {1e-3, 2e-3, 4e-3})
      t.add(arm, n, lr, 1, hand_loss(hand_compute(n) / compute_factor) + (lr == 2e-3 ? 0 : 0.05));
}

// An ablation whose loss at its compute C is the law's at C / 2.5 needs 2.5 times the first
// arm's compute for that loss: ratio 2.5, above 1. One whose loss is the law's at 1.6 C reaches
// it on 1 / 1.6 of the compute. Their product is taken where both have an optimum.
TEST(SweepCompare, EffectiveComputeRatioOfAnArmWithoutALaw) {
  HandTable t;
  add_law_arm(t, "base");
  for (double n : {1e4, 1e5}) {
    t.add("worse", n, 2e-3, 1, hand_loss(hand_compute(n) / 2.5));
    t.add("better", n, 2e-3, 1, hand_loss(hand_compute(n) * 1.6));
  }
  const Comparison c = compare_arms(t.jobs, t.results, "val_loss", 20, 1);
  ASSERT_EQ(c.arms.size(), 3u);
  EXPECT_FALSE(c.arms[0].pointwise);
  EXPECT_TRUE(c.arms[1].pointwise);
  EXPECT_TRUE(c.arms[2].pointwise);
  EXPECT_NEAR(c.arms[0].law.E, 1.0, 1e-6);
  EXPECT_TRUE(c.references.front().multipliers.empty());  // no other arm with a law
  ASSERT_EQ(c.pointwise.size(), 2u);
  for (const PointwiseRow& row : c.pointwise) {
    ASSERT_EQ(row.ratios.size(), 2u);
    EXPECT_EQ(row.ratios[0].arm, "worse");
    EXPECT_NEAR(row.ratios[0].value, 2.5, 2.5e-5) << row.target;
    EXPECT_NEAR(row.ratios[1].value, 1 / 1.6, 1e-5) << row.target;
    ASSERT_TRUE(row.product);
    EXPECT_NEAR(row.product->value, 2.5 / 1.6, 2e-5);
    for (const Multiplier& m : {row.ratios[0], row.ratios[1], *row.product}) {
      // Resamples of points exactly on a law refit that law: intervals around the value.
      EXPECT_NEAR(m.interval.lo / m.value, 1.0, 1e-3) << m.arm;
      EXPECT_NEAR(m.interval.hi / m.value, 1.0, 1e-3) << m.arm;
      EXPECT_EQ(m.unreachable, 0);
    }
  }
  EXPECT_EQ(c.pointwise[0].optima[0].compute, hand_compute(1e4));
  const std::string text = describe(c, NAN);
  EXPECT_NE(text.find("no law: 2 sizes, the fit of L(C) needs at least 4"), std::string::npos);
  EXPECT_NE(text.find("effective compute, point by point"), std::string::npos) << text;
  EXPECT_EQ(text.find("compute multiplier"), std::string::npos) << text;
}

// Arms with too few sizes (two, one) sit beside an arm with a law of its own (3x the compute of
// the first everywhere): its multiplier as before, theirs point by point; the product only where
// both have an optimum. Only the first arm must have a law.
TEST(SweepCompare, ArmsWithoutALawNeverStopTheComparison) {
  HandTable t;
  add_law_arm(t, "base");
  add_law_arm(t, "law", 3.0);
  for (double n : {1e4, 3e4}) t.add("two", n, 2e-3, 1, hand_loss(hand_compute(n) / 2));
  t.add("one", 3e4, 2e-3, 1, hand_loss(hand_compute(3e4) / 1.5));
  Comparison c;
  ASSERT_NO_THROW(c = compare_arms(t.jobs, t.results, "val_loss", 10, 1));
  for (const Reference& r : c.references) {
    ASSERT_EQ(r.multipliers.size(), 1u);
    EXPECT_EQ(r.multipliers[0].arm, "law");
    EXPECT_NEAR(r.multipliers[0].value, 3.0, 3e-5);
  }
  ASSERT_EQ(c.pointwise.size(), 2u);
  EXPECT_EQ(c.pointwise[0].target, 1e4);
  EXPECT_NEAR(c.pointwise[0].ratios[0].value, 2.0, 2e-5);
  EXPECT_TRUE(std::isnan(c.pointwise[0].ratios[1].value));  // "one" has no optimum there
  EXPECT_FALSE(c.pointwise[0].product);
  ASSERT_TRUE(c.pointwise[1].product);
  EXPECT_NEAR(c.pointwise[1].product->value, 3.0, 3e-5);

  const std::string text = describe(c, NAN);
  EXPECT_NE(text.find("compute multiplier at equal loss"), std::string::npos);
  EXPECT_NE(text.find("product"), std::string::npos);
  EXPECT_NE(text.find("one-at-a-time ratios multiplied"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(comparison_json(c));
  EXPECT_TRUE(j["arms"][2]["pointwise"].get<bool>());
  EXPECT_FALSE(j["arms"][2].contains("E"));
  ASSERT_EQ(j["pointwise"].size(), 2u);
  EXPECT_TRUE(j["pointwise"][0]["product"].is_null());
  EXPECT_NEAR(j["pointwise"][1]["ratios"][1]["value"].get<double>(), 1.5, 1.5e-5);
  const std::string svg = render_comparison_svg(c);
  EXPECT_NE(svg.find("two best (no law)"), std::string::npos);
  EXPECT_EQ(svg.find("two fit"), std::string::npos);

  HandTable short_first;
  for (double n : {1e4, 3e4}) short_first.add("a", n, 2e-3, 1, hand_loss(hand_compute(n)));
  add_law_arm(short_first, "b");
  EXPECT_NE(error_of([&] {
              compare_arms(short_first.jobs, short_first.results, "val_loss", 0, 1);
            }).find("arm a, the first (the others are compared through its law): 2 sizes"),
            std::string::npos);
}

// The spread between seeds, pooled: per point the squared deviations from its seeds' mean, summed
// over the points with two or more finished seeds, over their n - 1 degrees of freedom.
TEST(SweepCompare, SeedSpreadIsPooledOverThePointsWithSeveralSeeds) {
  HandTable t;
  t.add("a", 1e4, 1e-3, 1, 1.0);  // mean 1.1, squares 0.02, 1 degree of freedom
  t.add("a", 1e4, 1e-3, 2, 1.2);
  t.add("a", 1e4, 1e-3, 3, 9.0);
  t.results.back().status = "failed";  // not counted
  t.add("a", 1e4, 2e-3, 1, 5.0);       // one seed: no spread of its own
  t.add("a", 3e4, 1e-3, 1, 2.0);       // mean 2.2, squares 0.14, 2 degrees of freedom
  t.add("a", 3e4, 1e-3, 2, 2.1);
  t.add("a", 3e4, 1e-3, 3, 2.5);
  t.add("b", 1e4, 1e-3, 1, 3.0);  // mean 3.2, squares 0.08, 1 degree of freedom
  t.add("b", 1e4, 1e-3, 2, 3.4);
  const SeedSpread s = seed_spread(t.jobs, t.results, "val_loss");
  EXPECT_NEAR(s.sd, std::sqrt((0.02 + 0.14 + 0.08) / 4), 1e-12);
  EXPECT_EQ(s.points, 3);
  EXPECT_EQ(s.min_seeds, 2);
  EXPECT_EQ(s.max_seeds, 3);
  HandTable single;
  single.add("a", 1e4, 1e-3, 1, 1.0);
  single.add("a", 1e4, 2e-3, 1, 1.5);
  EXPECT_EQ(seed_spread(single.jobs, single.results, "val_loss").points, 0);
}

// Only the points that compete for a size's pick are pooled: the best lr by seed mean and the
// next lr on either side at its batch size. A rate two steps away that diverges (its seeds 2.0
// apart) and a point at another batch size are left out.
TEST(SweepCompare, SeedSpreadPoolsOnlyThePointsCompetingForThePick) {
  HandTable t;
  const double lrs[] = {1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2};
  const double means[] = {3.0, 2.6, 2.5, 2.7, 4.0};
  for (size_t i = 0; i < 5; ++i)
    for (int64_t seed : {1, 2}) {
      const double apart = i == 0 ? 2.0 : i == 4 ? 1.0 : 0.02 * static_cast<double>(i);
      t.add("a", 1e4, lrs[i], seed, means[i] + (seed == 1 ? -apart : apart) / 2);
    }
  t.add("a", 1e4, 4e-3, 1, 3.5, 64);  // another batch size, beside the best lr
  t.add("a", 1e4, 4e-3, 2, 5.5, 64);
  const SeedSpread s = seed_spread(t.jobs, t.results, "val_loss");
  // lrs 2e-3, 4e-3 and 8e-3: seeds 0.02, 0.04 and 0.06 apart, squares d^2 / 2 each.
  EXPECT_EQ(s.points, 3);
  EXPECT_NEAR(s.sd, std::sqrt((0.02 * 0.02 + 0.04 * 0.04 + 0.06 * 0.06) / 2 / 3), 1e-12);
  // At the grid's edge the best has one neighbour.
  HandTable edge;
  for (int64_t seed : {1, 2}) {
    edge.add("a", 1e4, 1e-3, seed, 2.0 + (seed == 1 ? -0.01 : 0.01));
    edge.add("a", 1e4, 2e-3, seed, 2.5 + (seed == 1 ? -0.03 : 0.03));
    edge.add("a", 1e4, 4e-3, seed, 4.0 + (seed == 1 ? -1.0 : 1.0));
  }
  const SeedSpread e = seed_spread(edge.jobs, edge.results, "val_loss");
  EXPECT_EQ(e.points, 2);
  EXPECT_NEAR(e.sd, std::sqrt((2 * 0.01 * 0.01 + 2 * 0.03 * 0.03) / 2), 1e-12);
}

// Each arm's law and intervals as the bootstrap of its optima alone gives them (the comparison
// before seed noise), resample by resample.
void expect_resamples_without_noise(const Comparison& c, int resamples, uint64_t seed) {
  for (const ArmFit& a : c.arms) {
    scaling::FitOptions options;
    options.form = a.form;
    std::vector<double> n, d, l;
    for (const Optimum& o : a.optima) {
      n.push_back(o.params);
      d.push_back(o.tokens);
      l.push_back(o.loss);
    }
    const scaling::FitPoints points = scaling::make_fit_points(a.form, n, d, l);
    const scaling::FitResult fit = scaling::fit_scaling_law(points, options);
    const auto thetas = scaling::bootstrap_fits(points, options, fit, resamples, seed);
    ASSERT_EQ(a.resampled.size(), thetas.size());
    for (size_t r = 0; r < thetas.size(); ++r) {
      const auto law = scaling::ScalingLaw::from_theta(a.form, thetas[r]);
      EXPECT_EQ(a.resampled[r].E, law.E) << a.arm << " resample " << r;
      EXPECT_EQ(a.resampled[r].A, law.A) << a.arm << " resample " << r;
      EXPECT_EQ(a.resampled[r].alpha, law.alpha) << a.arm << " resample " << r;
    }
    const auto intervals = scaling::percentile_intervals(thetas);
    for (int p = 0; p < scaling::kParamCount; ++p) {
      EXPECT_EQ(a.intervals[p].lo, intervals[p].lo) << a.arm << " " << p;
      EXPECT_EQ(a.intervals[p].hi, intervals[p].hi) << a.arm << " " << p;
    }
  }
}

// Without points of several seeds, or with seeds that agree exactly, the intervals are those of
// the optima's bootstrap alone, to the bit.
TEST(SweepCompare, NoSeedSpreadGivesTheIntervalsOfTheOptimaAlone) {
  HandTable one_seed, same_seeds;
  for (const std::string arm : {"a", "b"})
    for (size_t i = 0; i < 4; ++i)
      for (double lr : {1e-3, 2e-3, 4e-3}) {
        const double n = kHandSizes[i];
        // Off the law by a few percent, so that the resamples differ.
        const double loss = hand_loss(hand_compute(n)) * (1 + 0.03 * std::sin(7.0 * i + 1e3 * lr)) *
                            (arm == "b" ? 1.02 : 1.0);
        one_seed.add(arm, n, lr, 1, loss);
        for (int64_t seed : {1, 2}) same_seeds.add(arm, n, lr, seed, loss);
      }
  const Comparison c = compare_arms(one_seed.jobs, one_seed.results, "val_loss", 40, 5);
  EXPECT_EQ(c.spread.points, 0);
  EXPECT_EQ(describe(c, NAN).find("seed spread"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(comparison_json(c))["seed_spread"].is_null());
  expect_resamples_without_noise(c, 40, 5);
  const Comparison same = compare_arms(same_seeds.jobs, same_seeds.results, "val_loss", 40, 5);
  // Per arm, the best of three lrs at the grid's edge at three sizes (two points) and inside it
  // at the largest (three).
  EXPECT_EQ(same.spread.points, 18);
  EXPECT_EQ(same.spread.sd, 0.0);
  expect_resamples_without_noise(same, 40, 5);
}

// With a seed spread of 0.01: each (lr, batch) point's seed mean moves by noise of sd 0.01 /
// sqrt(its seeds) before each size's best lr is picked. Four lrs of equal means and two seeds
// each: the best of four draws of sd 0.01 / sqrt(2) lies on average 1.0294 of those below the
// mean, and the lr that wins changes. A point of four seeds moves by 0.01 / 2. The same on one
// thread and on two.
TEST(SweepCompare, SeedNoiseMovesEveryPointBeforeTheBestLrIsPicked) {
  const double delta = 0.01 / std::sqrt(2.0);
  HandTable t;
  for (double n : kHandSizes)
    for (double lr : {1e-3, 2e-3, 4e-3, 8e-3})
      for (int64_t seed : {1, 2})
        t.add("base", n, lr, seed, hand_loss(hand_compute(n)) + (seed == 1 ? -delta : delta));
  // One point of four seeds whose squares over its 3 degrees of freedom are 2 delta^2 as well.
  const double b_loss = hand_loss(hand_compute(3e4) / 2);
  for (int64_t seed : {1, 2, 3, 4})
    t.add("b", 3e4, 2e-3, seed, b_loss + (seed <= 2 ? -1 : 1) * delta * std::sqrt(1.5));
  const int resamples = 400;
  const Comparison c = compare_arms(t.jobs, t.results, "val_loss", resamples, 3);
  EXPECT_NEAR(c.spread.sd, 0.01, 1e-12);
  EXPECT_EQ(c.spread.points, 9);  // per size of base, the first lr (the best) and the next
  EXPECT_NE(describe(c, NAN).find("seed spread: sd 0.01 over 9 points with 2 to 4 seeds (pooled "
                                  "over each size's best lr and its neighbours), added to every "
                                  "resample"),
            std::string::npos)
      << describe(c, NAN);
  EXPECT_NEAR(nlohmann::json::parse(comparison_json(c))["seed_spread"]["sd"].get<double>(), 0.01,
              1e-12);

  const ArmFit& base = c.arms[0];
  ASSERT_EQ(base.resampled_optima.size(), static_cast<size_t>(resamples));
  double shift = 0;
  std::set<double> lrs;
  for (const std::vector<Optimum>& optima : base.resampled_optima)
    for (size_t i = 0; i < optima.size(); ++i) {
      shift += (optima[i].loss - base.optima[i].loss) / (resamples * 4.0);
      lrs.insert(optima[i].lr);
    }
  EXPECT_NEAR(shift, -1.0294 * 0.01 / std::sqrt(2.0), 0.0012);
  EXPECT_EQ(lrs.size(), 4u);

  const ArmFit& b = c.arms[1];
  ASSERT_TRUE(b.pointwise);
  double sum = 0, squares = 0;
  for (const std::vector<Optimum>& optima : b.resampled_optima) {
    sum += optima[0].loss - b_loss;
    squares += (optima[0].loss - b_loss) * (optima[0].loss - b_loss);
  }
  EXPECT_NEAR(sum / resamples, 0, 0.0015);
  EXPECT_NEAR(std::sqrt(squares / resamples), 0.01 / 2, 0.0008);
  // The ratio's interval now spans the noise: 0.005 of loss is several percent of compute here.
  const Multiplier& ratio = c.pointwise[0].ratios[0];
  EXPECT_NEAR(ratio.value, 2.0, 1e-3);
  EXPECT_LT(ratio.interval.lo, 1.98);
  EXPECT_GT(ratio.interval.hi, 2.02);

  Comparison one_thread;
  {
    testing::ScopedThreads threads(1);
    one_thread = compare_arms(t.jobs, t.results, "val_loss", resamples, 3);
  }
  for (size_t r = 0; r < static_cast<size_t>(resamples); ++r) {
    EXPECT_EQ(one_thread.arms[0].resampled[r].A, base.resampled[r].A) << r;
    EXPECT_EQ(one_thread.arms[1].resampled_optima[r][0].loss, b.resampled_optima[r][0].loss) << r;
  }
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

// val_data: one text or a list, each its own results column "ood_" + its stem; two texts of one
// stem, or a stem with other characters than letters, digits, _ and -, are refused.
TEST(SweepSpec, ValDataIsATextOrAListOfThem) {
  testing::TempDir dir("k3_sweep_val_data");
  const std::string english = dir.file("english.txt", "a"),
                    french = dir.file("french_1-b.txt", "b");
  fs::create_directories(dir.path() + "/other");
  const std::string english_too = dir.file("other/english.md", "c");
  const std::string ok = "[sweep]\nout = \"x\"\nsizes = [1e4]\ntokens_per_param = 20\nlr = 1e-3\n";
  auto with = [&](const std::string& val_data) {
    return spec_of(ok + "val_data = " + val_data + "\n" + kArm);
  };
  const SweepSpec one = with("\"" + english + "\"");
  ASSERT_EQ(one.val_data, std::vector<std::string>{english});
  EXPECT_EQ(ood_column(one.val_data[0]), "ood_english");
  const SweepSpec two = with("[\"" + english + "\", \"" + french + "\"]");
  ASSERT_EQ(two.val_data, (std::vector<std::string>{english, french}));
  EXPECT_EQ(ood_column(two.val_data[1]), "ood_french_1-b");
  EXPECT_TRUE(spec_of(ok + kArm).val_data.empty());

  EXPECT_NE(error_of([&] {
              with("[\"" + english + "\", \"" + english_too + "\"]");
            }).find("field sweep.val_data: two texts named english"),
            std::string::npos);
  for (const char* bad : {"two words.txt", "a.b.txt", "é.txt"}) {
    const std::string path = dir.file(bad, "d");
    EXPECT_NE(error_of([&] { with("\"" + path + "\""); }).find("may hold only letters, digits"),
              std::string::npos)
        << bad;
  }
  for (const std::string& bad : {std::string("[]"), std::string("3"), "[\"" + english + "\", 3]"})
    EXPECT_NE(error_of([&] { with(bad); }).find("field sweep.val_data: expected"),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of([&] { with("\"" + dir.path() + "/nope.txt\""); }).find("no such file"),
            std::string::npos);
}

// seed_sizes: the sizes that run every seed; the others run the first seed only. A size not in
// sweep.sizes, or fewer than two seeds, is refused.
TEST(SweepJobs, SeedSizesRunTheExtraSeedsThereOnly) {
  const std::string grid =
      "[sweep]\nout = \"/tmp/k3-sweep-test\"\nsizes = [2e4, 8e4]\ntokens_per_param = 10\n"
      "lr = [1e-3, 3e-3]\n";
  const std::string set = "[set]\ndata.seq_len = 32\ntrain.batch_size = 4\n";
  const std::vector<Job> jobs =
      plan_jobs(spec_of(grid + "seeds = [5, 6, 7]\nseed_sizes = [8e4]\n" + set + kArm));
  std::map<double, std::multiset<int64_t>> seeds;  // target -> seeds over its jobs
  for (const Job& j : jobs) seeds[j.target].insert(j.seed);
  EXPECT_EQ(seeds[2e4], (std::multiset<int64_t>{5, 5}));
  EXPECT_EQ(seeds[8e4], (std::multiset<int64_t>{5, 5, 6, 6, 7, 7}));
  EXPECT_EQ(jobs.size(), 8u);
  EXPECT_EQ(plan_jobs(spec_of(grid + "seeds = [5, 6]\n" + set + kArm)).size(), 8u);  // all sizes

  EXPECT_NE(error_of([&] {
              spec_of(grid + "seeds = [5, 6]\nseed_sizes = [5e4]\n" + kArm);
            }).find("field sweep.seed_sizes: 50000 is not one of sweep.sizes"),
            std::string::npos);
  for (const char* seeds_line : {"seeds = [5]\n", ""})
    EXPECT_NE(error_of([&] { spec_of(grid + seeds_line + "seed_sizes = [8e4]\n" + kArm); })
                  .find("field sweep.seed_sizes: names the sizes that run every seed: list two "
                        "seeds or more"),
              std::string::npos)
        << seeds_line;
}

// An arm's own sizes and learning rates replace the sweep's for it alone; seed_sizes may name
// its sizes.
TEST(SweepJobs, AnArmsOwnSizesAndRatesReplaceTheSweepsForItAlone) {
  const std::string preset = testing::source_dir() + "/configs/k3-nano.json";
  const std::string text =
      "[sweep]\nout = \"/tmp/k3-sweep-test\"\nsizes = [2e4, 8e4]\ntokens_per_param = 10\n"
      "lr = [1e-3]\nseeds = [5, 6]\nseed_sizes = [4e4]\n[set]\ndata.seq_len = 32\n"
      "train.batch_size = 4\n[[arm]]\nname = \"all\"\npreset = \"" +
      preset +
      "\"\n"
      "[[arm]]\nname = \"some\"\npreset = \"" +
      preset + "\"\nsizes = [4e4]\nlr = [5e-4, 1e-3]\n";
  std::map<std::string, std::multiset<double>> targets, lrs;  // arm -> those of its jobs
  for (const Job& j : plan_jobs(spec_of(text))) {
    targets[j.arm].insert(j.target);
    lrs[j.arm].insert(j.lr);
  }
  EXPECT_EQ(targets["all"], (std::multiset<double>{2e4, 8e4}));
  EXPECT_EQ(lrs["all"], (std::multiset<double>{1e-3, 1e-3}));
  EXPECT_EQ(targets["some"], (std::multiset<double>{4e4, 4e4, 4e4, 4e4}));  // both seeds there
  EXPECT_EQ(lrs["some"], (std::multiset<double>{5e-4, 5e-4, 1e-3, 1e-3}));
}

// result.json keeps every loss, the learning curve and the out-of-distribution losses; a result
// written before it had them reads with none.
TEST(SweepResults, ResultJsonRoundTripsTheCurveAndTheOodLosses) {
  testing::TempDir dir("k3_sweep_result");
  JobResult r;
  r.status = "done";
  r.val_loss = 1.0 / 3;
  r.val_loss_smoothed = 0.3;
  r.val_curve = {{10, 4.5}, {20, 2.0 / 3}, {30, 1.0 / 3}};
  r.ood = {{"ood_english", 4.25}, {"ood_french_1-b", 5.0 / 7}};
  r.seconds = 12.5;
  write_job_result(dir.path(), r);
  const JobResult back = read_job_result(dir.path());
  EXPECT_EQ(back.status, "done");
  EXPECT_EQ(back.val_loss, r.val_loss);
  EXPECT_EQ(back.val_loss_smoothed, r.val_loss_smoothed);
  EXPECT_EQ(back.val_curve, r.val_curve);
  EXPECT_EQ(back.ood, r.ood);
  EXPECT_EQ(back.seconds, r.seconds);

  JobResult failed;
  failed.status = "failed";
  failed.reason = "5 non-finite steps in a row";
  write_job_result(dir.path(), failed);
  const JobResult f = read_job_result(dir.path());
  EXPECT_EQ(f.reason, failed.reason);
  EXPECT_TRUE(std::isnan(f.val_loss));
  EXPECT_TRUE(f.val_curve.empty());
  EXPECT_TRUE(f.ood.empty());

  dir.file("result.json", R"({"status": "done", "val_loss": 1.5, "val_loss_smoothed": 1.4,
                              "ood_loss": 3.0, "seconds": 2})");
  const JobResult old = read_job_result(dir.path());
  EXPECT_EQ(old.val_loss, 1.5);
  EXPECT_TRUE(old.val_curve.empty());
  EXPECT_TRUE(old.ood.empty());
}

// A sweep directory that moved (a clone elsewhere): a job's run.toml planned under A/x/out is
// accepted under B/out and rewritten with the new paths; a changed setting is still refused.
TEST(SweepJobs, AMovedSweepDirectoryKeepsItsJobs) {
  testing::TempDir dir("k3_sweep_moved");
  auto plan = [&](const std::string& out, const std::string& warmup) {
    return plan_jobs(spec_of("[sweep]\nout = \"" + out +
                             "\"\nsizes = [2e4]\ntokens_per_param = 10\nlr = 1e-3\nthreads = 1\n"
                             "[set]\ndata.seq_len = 32\ntrain.batch_size = 4\n"
                             "train.warmup_fraction = " +
                             warmup + "\n" + kArm))
        .front();
  };
  const std::string was = dir.path() + "/a/x/out", is = dir.path() + "/b/out",
                    edited = dir.path() + "/c/out";
  write_job_files(plan(was, "0.05"), was);
  for (const std::string& to : {is, edited}) {
    fs::create_directories(fs::path(to).parent_path());
    fs::copy(was, to, fs::copy_options::recursive);
  }
  const Job moved = plan(is, "0.05");
  const std::string run_toml = moved.dir(is) + "/run.toml";
  ASSERT_NE(read_file(run_toml).find(was + "/jobs/"), std::string::npos);
  EXPECT_NO_THROW(write_job_files(moved, is));
  EXPECT_EQ(read_file(run_toml), train::to_toml(moved.config));
  EXPECT_EQ(read_file(run_toml).find(was), std::string::npos);
  EXPECT_NO_THROW(write_job_files(moved, is));  // and again, now in place

  const Job changed = plan(edited, "0.1");
  const std::string before = read_file(changed.dir(edited) + "/run.toml");
  EXPECT_NE(error_of([&] {
              write_job_files(changed, edited);
            }).find("was planned with other settings (train.warmup_fraction: 0.05 -> 0.1)"),
            std::string::npos);
  EXPECT_EQ(read_file(changed.dir(edited) + "/run.toml"), before);
}

}  // namespace
}  // namespace k3::sweep
