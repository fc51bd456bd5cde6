// The efficiency model (planner/efficiency.h): a GEMM's time by shape, one GPU's compute in a
// micro-batch against the model's FLOP count, and the schedules' bubbles and memory.
#include "k3/planner/efficiency.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/model/config.h"
#include "k3/model/inventory.h"
#include "k3/model/memory_estimate.h"
#include "k3/planner/plan.h"
#include "k3/planner/plan_internal.h"
#include "k3/train/preflight/memory_estimate.h"

namespace k3::planner {
namespace {

model::ModelConfig config(const std::string& name) {
  return model::load_model_config(testing::source_dir() + "/configs/" + name);
}

// A product whose tiles fill the SMs in one whole wave runs at the ceiling; a row more takes a
// second wave; a product with a short contraction is bound by writing its output.
TEST(Efficiency, GemmTimeByShape) {
  const Cluster& h100 = cluster_preset("H100");
  ASSERT_EQ(h100.sms, 132);
  const double rows = kGemmTile * 12, columns = kGemmTile * 11, k = 8192;
  const Gemm full{rows, columns, k};
  const double flops = 2 * rows * columns * k;
  EXPECT_DOUBLE_EQ(gemm_seconds(full, h100, kGemmCeiling, false),
                   flops / (h100.peak_flops * kGemmCeiling));
  EXPECT_DOUBLE_EQ(gemm_seconds(full, h100, kGemmCeiling, true),
                   flops / (h100.peak_fp8_flops * kGemmCeiling));
  const Gemm one_more{rows + 1, columns, k};
  EXPECT_NEAR(gemm_seconds(one_more, h100, kGemmCeiling, false),
              2 * gemm_seconds(full, h100, kGemmCeiling, false), 1e-3 * flops / h100.peak_flops);
  const Gemm short_contraction{rows, columns, 8};
  EXPECT_DOUBLE_EQ(gemm_seconds(short_contraction, h100, kGemmCeiling, false),
                   ((rows + columns) * 8 + rows * columns) * 2 / h100.hbm_bandwidth);
  // A grouped GEMM of small experts fills the waves a single one leaves idle.
  const Gemm one_expert{256, 2048, 7168}, grouped{256, 2048, 7168, 66};
  EXPECT_LT(gemm_seconds(grouped, h100, kGemmCeiling, false),
            66 * gemm_seconds(one_expert, h100, kGemmCeiling, false) / 2);
}

// Over every GPU and micro-batch, the weight products' FLOPs are the model's 6·N_active·D (8 with
// the forward recomputed), whatever the layout: tp's shards, the experts over ep, the layers
// over pp and the tokens over cp add up to the model.
TEST(Efficiency, ProductsAddUpToTheModelsFlops) {
  const Cluster& h100 = cluster_preset("H100");
  for (const char* name : {"llama-nano.json", "deepseek-v3-nano.json", "k3-nano.json"}) {
    const model::ModelConfig c = config(name);
    const model::Model m(c, /*allocate=*/false);
    const std::vector<model::WeightProduct> products = model::weight_products(m);
    const double matmul = static_cast<double>(m.matmul_params());
    // The weights tp does not split, every tp rank multiplies whole.
    double replicated = 0;
    for (const model::WeightProduct& w : products)
      if (w.tp_dim < 0)
        replicated += static_cast<double>(w.count * w.out * w.in) *
                      (w.routed ? static_cast<double>(c.num_experts_per_token) /
                                      static_cast<double>(c.num_experts)
                                : 1.0);
    for (int64_t tp : {1, 2})
      for (int64_t ep : {1, 2})
        for (int64_t cp : {1, 2})
          for (bool recompute : {false, true}) {
            if (ep > 1 && c.num_experts == 0) continue;
            ComputeShape s;
            s.seq = 256, s.tokens = 2 * s.seq / cp;  // two sequences a reader
            s.tp = tp, s.ep = ep, s.cp = cp, s.pp = 2, s.recompute = recompute;
            const MicroBatchCompute mb = micro_batch_compute(c, products, s, h100);
            const double gpus = static_cast<double>(tp * ep * cp * s.pp);
            const double readers_tokens = static_cast<double>(ep) * 2 * s.seq;  // dp = 1
            const double per_token = matmul + static_cast<double>(tp - 1) * replicated;
            EXPECT_NEAR(mb.gemm_flops * gpus / readers_tokens, (recompute ? 8 : 6) * per_token,
                        1e-9 * matmul)
                << name << " tp " << tp << " ep " << ep << " cp " << cp;
            EXPECT_GT(mb.attention_seconds, 0);
            EXPECT_GT(mb.elementwise_seconds, 0);
          }
  }
}

// Muon's Newton-Schulz: five iterations of three products on a matrix, the smaller side squared.
TEST(Efficiency, NewtonSchulzFlops) {
  const std::vector<model::WeightProduct> products = {
      {100, 300, 2, false, 0, false}, {300, 100, 1, false, 1, false}, {50, 7, 1, false, -1, true}};
  EXPECT_DOUBLE_EQ(newton_schulz_flops(products),
                   3 * 5 * (2.0 * 100 * 100 * 300 * 2 + 2.0 * 100 * 100 * 100));
}

PlanRequest deepseek_request(const std::string& schedule) {
  PlanRequest r;
  r.model = config("deepseek-v3-nano.json");
  r.cluster = cluster_preset("H800");
  r.layout = parse_layout("dp=2,pp=4,ep=2");
  r.seq = 256;
  r.global_batch_tokens = 256 * 32;  // 8 micro-batches a reader
  r.optimizer = "adamw";
  r.schedule = schedule;
  return r;
}

// DualPipe: the bubble (p − 2)/(3m) of 1F1B's (p − 1)/m, two stages' parameters a GPU, pp + 1
// micro-batches' activations in flight, and the all-to-alls behind the other direction's compute.
TEST(Efficiency, DualPipeBubbleMemoryAndOverlap) {
  EXPECT_DOUBLE_EQ(pipeline_bubble("dualpipe", 16, 1, 120), 14.0 / 360);
  EXPECT_DOUBLE_EQ(pipeline_bubble("1f1b", 16, 1, 120), 15.0 / 120);
  // Pipeline rank 0's memory in both.
  const ModelCounts counts = count_model(deepseek_request("1f1b").model);
  const Plan one = make_plan(deepseek_request("1f1b"), counts, /*every_memory_rank=*/false);
  const Plan dual = make_plan(deepseek_request("dualpipe"), counts, /*every_memory_rank=*/false);
  EXPECT_DOUBLE_EQ(dual.bubble, 2.0 / 24);
  EXPECT_DOUBLE_EQ(one.bubble, 3.0 / 8);
  auto part = [](const Plan& p, const std::string& name) {
    for (const MemoryPart& m : p.memory)
      if (m.name == name) return m.bytes;
    ADD_FAILURE() << name;
    return 0.0;
  };
  for (const char* name : {"weights", "master weights", "optimizer states"})
    EXPECT_DOUBLE_EQ(part(dual, name), 2 * part(one, name)) << name;
  // Rank 0 of 1F1B holds pp = 4 micro-batches in flight; the estimate asked for 5 instead.
  model::ActivationLayout five = train::activation_layout(
      detail::run_config(deepseek_request("1f1b"), 8), dual.request.model, 0);
  ASSERT_EQ(five.in_flight, 4);
  five.in_flight = 5;
  EXPECT_DOUBLE_EQ(part(dual, "activations"),
                   model::activation_bytes(dual.request.model, five) / 2);
  EXPECT_GT(part(dual, "activations"), part(one, "activations"));
  EXPECT_EQ(dual.comm_bytes(), one.comm_bytes());
  EXPECT_EQ(dual.compute_seconds, one.compute_seconds);
  EXPECT_LT(dual.exposed_comm_seconds, one.exposed_comm_seconds);  // the ep all-to-alls hidden
}

TEST(Efficiency, RefusesWhatTheSchedulesAndPrecisionsCannotRun) {
  auto error_of = [](auto change) {
    PlanRequest r = deepseek_request("dualpipe");
    change(r);
    return testing::error_of([&] { make_plan(r); });
  };
  EXPECT_NE(error_of([](PlanRequest& r) {
              r.layout = parse_layout("dp=2,pp=2,vp=2,ep=2");
            }).find("needs an even pp of at least 2 and vp = 1 (the layout has pp=2, vp=2)"),
            std::string::npos);
  EXPECT_NE(error_of([](PlanRequest& r) {
              r.layout = parse_layout("dp=2,pp=3,ep=2");
            }).find("needs an even pp of at least 2 and vp = 1 (the layout has pp=3, vp=1)"),
            std::string::npos);
  EXPECT_NE(error_of([](PlanRequest& r) {
              r.global_batch_tokens = 256 * 12;
            }).find("3 micro-batches a step; it feeds half from each end"),
            std::string::npos);
  EXPECT_NE(error_of([](PlanRequest& r) { r.schedule = "gpipe"; }).find("one of 1f1b, dualpipe"),
            std::string::npos);
  EXPECT_NE(error_of([](PlanRequest& r) {
              r.cluster = cluster_preset("A100");
              r.fp8 = true;
            }).find("the A100 has no FP8 tensor cores"),
            std::string::npos);
}

// FP8 weight products: the GEMMs but the head's at the FP8 peak, the casts of their operands
// added to the elementwise work, the attention cores unchanged.
TEST(Efficiency, Fp8SpeedsTheGemmsAlone) {
  PlanRequest r = deepseek_request("1f1b");
  r.model = config("llama-3.1-8b.json");
  r.cluster = cluster_preset("H100");
  r.layout = parse_layout("dp=8");
  r.seq = 8192;
  r.global_batch_tokens = 8192 * 16;
  const Plan bf16 = make_plan(r);
  r.fp8 = true;
  const Plan fp8 = make_plan(r);
  const double ratio = fp8.micro_batch.gemm_seconds / bf16.micro_batch.gemm_seconds;
  EXPECT_GT(ratio, 0.5);  // Llama 3 8B's head is 7% of its products
  EXPECT_LT(ratio, 0.55);
  EXPECT_EQ(fp8.micro_batch.attention_seconds, bf16.micro_batch.attention_seconds);
  EXPECT_GT(fp8.micro_batch.elementwise_seconds, bf16.micro_batch.elementwise_seconds);
  EXPECT_EQ(fp8.model_flops, bf16.model_flops);
}

}  // namespace
}  // namespace k3::planner
