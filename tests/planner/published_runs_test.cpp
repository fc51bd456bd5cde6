// configs/published-runs.tsv: the published runs docs/planner.md holds the planner against, each
// planned in its published layout. Its last column pins the planner's predictions (written by
// scripts/published_runs.py --write), so that a change to the model shows here and in the table;
// the calibration run's prediction is its reported throughput.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "common/test_util.h"
#include "k3/planner/plan.h"

namespace k3::planner {
namespace {

using Row = std::map<std::string, std::string>;

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream s(line);
  for (std::string cell; std::getline(s, cell, '\t');) out.push_back(cell);
  return out;
}

std::vector<Row> published_runs() {
  std::ifstream in(testing::source_dir() + "/configs/published-runs.tsv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = cells(line);
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> c = cells(line);
    EXPECT_EQ(c.size(), header.size()) << line;
    Row row;
    for (size_t i = 0; i < header.size() && i < c.size(); ++i) row[header[i]] = c[i];
    rows.push_back(row);
  }
  return rows;
}

// As scripts/published_runs.py asks `k3lab plan`.
Plan plan_of(const Row& run) {
  PlanRequest r;
  r.model = model::load_model_config(testing::source_dir() + "/configs/" + run.at("model"));
  r.cluster = cluster_preset(run.at("cluster"));
  r.layout = parse_layout(run.at("layout"));
  r.layout.zero = std::stoi(run.at("zero"));
  r.seq = std::stoll(run.at("seq"));
  r.global_batch_tokens = std::stoll(run.at("global_batch_sequences")) * r.seq;
  r.micro_rows = std::stoll(run.at("micro_batch"));
  r.fp8 = run.at("gemm") == "fp8";
  r.schedule = run.at("schedule");
  r.ep_overlap = run.at("ep_overlap") == "yes";
  r.activation = run.at("activation");
  r.optimizer = "adamw";
  return make_plan(r);
}

double tokens_per_gpu_second(const Plan& p) {
  return p.tokens_per_second() / static_cast<double>(p.request.layout.gpus());
}

TEST(PublishedRuns, PredictionsAreThePinnedOnes) {
  const std::vector<Row> runs = published_runs();
  ASSERT_GE(runs.size(), 10u);
  for (const Row& run : runs) {
    const double pinned = std::stod(run.at("predicted_tokens_per_gpu_second"));
    // Six significant digits in the file.
    EXPECT_NEAR(tokens_per_gpu_second(plan_of(run)), pinned, 1e-5 * pinned) << run.at("run");
  }
}

// Llama 3 405B on 8,192 H100s, 430 TFLOP/s a GPU by the planner's FLOP count: the one run the
// GEMM ceiling is calibrated on.
TEST(PublishedRuns, TheCalibrationRunIsMet) {
  for (const Row& run : published_runs()) {
    if (run.at("run") != "llama3-405b-8k") continue;
    const Plan p = plan_of(run);
    const double reported = std::stod(run.at("reported_value")) * 1e12 /
                            (p.model_flops / static_cast<double>(p.sequences * p.request.seq));
    EXPECT_NEAR(tokens_per_gpu_second(p) / reported, 1, 0.005);
    return;
  }
  FAIL() << "no llama3-405b-8k in configs/published-runs.tsv";
}

}  // namespace
}  // namespace k3::planner
