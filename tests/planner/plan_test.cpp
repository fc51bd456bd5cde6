// The planner's formulas (math §10) against the code they describe: the bubble against the
// simulated schedule, ZeRO's bytes per parameter, the memory against the run's own estimate, the
// data-parallel bytes against the flat buffer, the link classes, the search.
#include "k3/planner/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <tuple>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/model/experts/moonep_plan.h"
#include "k3/model/layer_factory.h"
#include "k3/model/model.h"
#include "k3/parallel/pipeline/simulate.h"
#include "k3/planner/plan_internal.h"

namespace k3::planner {
namespace {

// k3-small on H100s at sequence 2048, a step of 64 sequences: the searches' request.
PlanRequest small_h100_request() {
  PlanRequest r;
  r.model = model::load_model_config(testing::source_dir() + "/configs/k3-small.json");
  r.cluster = cluster_preset("H100");
  r.seq = 2048;
  r.global_batch_tokens = 2048 * 64;
  return r;
}

PlanRequest cpu_request(const std::string& config, const std::string& layout) {
  PlanRequest r;
  r.model = model::load_model_config(testing::source_dir() + "/configs/" + config);
  r.cluster = cluster_preset("cpu");
  r.layout = parse_layout(layout);
  r.seq = 64;
  return r;
}

TEST(Planner, BubbleIsTheSimulatedScheduleWithEqualStages) {
  for (int pp : {2, 4})
    for (int vp : {1, 2})
      for (int m : {4, 8}) {
        parallel::pipeline::ScheduleShape shape;
        shape.kind = vp > 1 ? parallel::pipeline::ScheduleKind::interleaved
                            : parallel::pipeline::ScheduleKind::one_f_one_b;
        shape.pp = pp, shape.vp = vp, shape.microbatches = m;
        const double simulated =
            parallel::pipeline::simulate(parallel::pipeline::make_schedule(shape)).bubble_ratio();
        EXPECT_NEAR(pipeline_bubble("1f1b", pp, vp, m), simulated, 1e-12)
            << "pp " << pp << " vp " << vp << " m " << m;
      }
}

// math §10's table: bf16 weights, fp32 master, gradients and AdamW's m and v (8 bytes).
TEST(Planner, ZeroBytesPerParameter) {
  const Precision gpu;
  EXPECT_DOUBLE_EQ(bytes_per_param(gpu, 8, 0, 8).total(), 2 + 4 + 4 + 8);
  EXPECT_DOUBLE_EQ(bytes_per_param(gpu, 8, 1, 8).total(), 2 + 4 + (4 + 8) / 8.0);
  EXPECT_DOUBLE_EQ(bytes_per_param(gpu, 8, 2, 8).total(), 2 + (4 + 4 + 8) / 8.0);
  EXPECT_DOUBLE_EQ(bytes_per_param(gpu, 4, 1, 4).total(), 2 + (4 + 4) / 4.0 + 4);  // Muon
}

// On the cpu preset the plan's memory is the pre-flight estimate of the same run, part by part.
TEST(Planner, CpuMemoryIsThePreflightEstimate) {
  PlanRequest r = cpu_request("k3-nano.json", "dp=2,tp=2,pp=2");
  r.layout.zero = 1;
  const Plan p = make_plan(r);
  double want = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const train::RunConfig c = detail::run_config(r, p.micro_batches);
    const std::unique_ptr<model::Model> m = detail::describe_rank(r, c, rank);
    const train::RunMemory mem = train::estimate_run_memory(*m, c, 0);
    want = std::max(want, mem.total());
  }
  EXPECT_DOUBLE_EQ(p.hbm_bytes(), want);
  EXPECT_EQ(p.host_bytes(), 0);
}

// Data parallelism moves the flat buffer: all-reduced (ZeRO 0, 1) or reduce-scattered (2), and
// all-gathered under ZeRO 1 and 2 (with AdamW: Muon adds its blocks' point-to-point traffic).
TEST(Planner, DataParallelBytesAreTheFlatBuffer) {
  PlanRequest r = cpu_request("dense-tiny.json", "dp=4");
  r.optimizer = "adamw";
  const double flat = static_cast<double>(model::Model(r.model, false).params().flat_size());
  for (int zero : {0, 1, 2}) {
    r.layout.zero = zero;
    const Plan p = make_plan(r);
    EXPECT_DOUBLE_EQ(p.comm_bytes("dp"), 4 * flat * (zero >= 1 ? 2 : 1) + (zero == 2 ? 8 : 0))
        << "zero " << zero;
    EXPECT_DOUBLE_EQ(p.comm_bytes("replica"), 16);
  }
}

TEST(Planner, TensorParallelStaysInTheNodeDataParallelCrossesIt) {
  PlanRequest r;
  r.model = model::load_model_config(testing::source_dir() + "/configs/k3-small.json");
  r.cluster = cluster_preset("H200");
  r.layout = parse_layout("dp=4,tp=4");
  r.seq = 1024;
  r.global_batch_tokens = 1024 * 16;
  const Plan p = make_plan(r);
  bool saw_tp = false, saw_dp = false;
  for (const Transfer& t : p.traffic) {
    if (t.group == "tp") {
      EXPECT_FALSE(t.across_nodes);
      saw_tp = true;
    }
    if (t.group == "dp") {
      EXPECT_TRUE(t.across_nodes);
      saw_dp = true;
    }
  }
  EXPECT_TRUE(saw_tp && saw_dp);
  EXPECT_EQ(p.micro_batches, 4);
  EXPECT_GT(p.mfu, 0);
  EXPECT_LT(p.mfu, r.gemm_ceiling);
}

// Measured routing (--routing): balanced loads give the balanced plan's bytes; under MoonEP a
// skewed micro-batch's plan is made again, its replicas (weights out, gradients home) counted.
TEST(Planner, ExpertBytesFollowTheMeasuredRouting) {
  PlanRequest r = cpu_request("k3-nano.json", "ep=2");
  r.optimizer = "adamw";
  r.micro_rows = 2;
  const int64_t E = r.model.num_experts, k = r.model.num_experts_per_token;
  const int64_t pairs = r.micro_rows * r.seq * k;  // rows a rank routes in one micro-batch
  const Plan balanced = make_plan(r);
  std::vector<int64_t> even(static_cast<size_t>(E), 2 * pairs / E), skewed = even;
  skewed[0] += skewed[E - 1], skewed[E - 1] = 0;  // expert 0 (ep rank 0's) takes E−1's rows
  for (int64_t l = 0; l < r.model.num_hidden_layers; ++l)
    if (model::ffn_kind(r.model, l) == model::FfnKind::LatentMoE) r.routing[l] = {pairs, even};
  EXPECT_DOUBLE_EQ(make_plan(r).comm_bytes("ep"), balanced.comm_bytes("ep"));

  r.layout.moonep = true;
  r.layout.moonep_slots = 2;
  const double weights =
      3.0 * static_cast<double>(r.model.moe_intermediate_size * r.model.expert_dim()) * 4;
  const double layers = static_cast<double>(r.routing.size());
  const double even_moonep = make_plan(r).comm_bytes("ep");  // balanced: no replica
  const std::map<int64_t, MoeRouting> measured = r.routing;
  r.routing.clear();  // no routing: every slot used, as many replicas sent as hosted
  EXPECT_DOUBLE_EQ(make_plan(r).comm_bytes("ep"), even_moonep + layers * weights * 2 * 2);
  r.routing = measured;
  for (auto& [layer, routing] : r.routing) routing.plan_loads = skewed;
  const model::MoonEpPlan plan = model::plan_moonep({2, static_cast<int>(E), 2, pairs}, skewed);
  int64_t sent = 0;
  for (int64_t e = 0; e < E / 2; ++e) sent += static_cast<int64_t>(plan.hosts[e].size()) - 1;
  ASSERT_GT(sent, 0);  // rank 0's hot expert is replicated on rank 1, which hosts it
  EXPECT_EQ(plan.replicas[0], 0);
  EXPECT_TRUE(plan.balanced());
  EXPECT_DOUBLE_EQ(make_plan(r).comm_bytes("ep"),
                   even_moonep + layers * weights * static_cast<double>(sent));
  r.routing.begin()->second.plan_loads.pop_back();
  EXPECT_THROW(make_plan(r), Error);
}

TEST(Planner, SearchRanksFittingLayoutsOfTheGpuCount) {
  PlanRequest r = small_h100_request();
  const std::vector<Plan> best = search_layouts(r, 16, 4);
  ASSERT_FALSE(best.empty());
  for (size_t i = 0; i < best.size(); ++i) {
    EXPECT_EQ(best[i].request.layout.gpus(), 16);
    EXPECT_TRUE(best[i].fits());
    if (i > 0) {
      EXPECT_LE(best[i - 1].step_seconds, best[i].step_seconds);
    }
  }
}

// A search screens with pipeline rank 0's memory and completes the fastest with the other memory
// ranks; both that and the plan made with every memory rank show the rank of ranks 0, 1 and the
// last whose estimate is the largest (the first of equals), part by part.
TEST(Planner, ScreenedPlanCompletedShowsTheWorstMemoryRank) {
  PlanRequest r = small_h100_request();
  const ModelCounts counts = count_model(r.model);
  std::set<int> worst;
  for (const char* activation : {"keep", "recompute"})
    for (const char* layout : {"dp=8,tp=2", "dp=2,tp=2,pp=4", "dp=2,pp=4,vp=2,ep=2",
                               "dp=4,pp=2,ep=2,cp=2", "dp=1,tp=2,pp=8,ep=2", "dp=1,pp=12"}) {
      r.activation = activation;
      r.layout = parse_layout(layout);
      r.layout.sequence_parallel = r.layout.tp > 1;
      const std::string what = std::string(layout) + " " + activation;
      Plan screened = make_plan(r, counts, /*every_memory_rank=*/false);
      EXPECT_EQ(screened.worst_pp_rank, 0) << what;
      detail::DescribedRanks described;
      detail::add_memory_ranks(screened, described);
      const Plan full = make_plan(r, counts, /*every_memory_rank=*/true);
      // The reference: each of the ranks described and estimated on its own.
      const train::RunConfig c = detail::run_config(r, full.micro_batches);
      const int last = static_cast<int>(r.layout.pp) - 1;
      int most_rank = -1;
      double most = 0;
      std::vector<MemoryPart> most_parts;
      for (int rank : std::set<int>{0, std::min(1, last), last}) {
        const std::vector<MemoryPart> parts = detail::memory_parts(
            r, train::estimate_run_memory(*detail::describe_rank(r, c, rank), c, 0));
        double sum = 0;
        for (const MemoryPart& m : parts) sum += m.bytes;
        if (most_rank < 0 || sum > most) most_rank = rank, most = sum, most_parts = parts;
      }
      worst.insert(most_rank);
      for (const Plan* p : std::initializer_list<const Plan*>{&screened, &full}) {
        EXPECT_EQ(p->worst_pp_rank, most_rank) << what;
        ASSERT_EQ(p->memory.size(), most_parts.size()) << what;
        for (size_t i = 0; i < most_parts.size(); ++i) {
          EXPECT_EQ(p->memory[i].name, most_parts[i].name) << what;
          EXPECT_EQ(p->memory[i].bytes, most_parts[i].bytes) << what << ": " << most_parts[i].name;
          EXPECT_EQ(p->memory[i].host, most_parts[i].host) << what;
          EXPECT_EQ(p->memory[i].detail, most_parts[i].detail) << what;
        }
      }
      EXPECT_EQ(screened.fits(), full.fits()) << what;
      EXPECT_EQ(screened.step_seconds, full.step_seconds) << what;
    }
  EXPECT_EQ(worst, (std::set<int>{0, 1}));  // the layouts tell the ranks apart
}

// Rank 0's memory floor (the parts no described rank is needed for) is its plan's activations and
// buffers, with every other part 0: no part above the plan's, so a layout whose floor does not fit
// does not.
TEST(Planner, MemoryFloorIsThePlansPartsThatNeedNoDescribedRank) {
  PlanRequest nano = cpu_request("k3-nano.json", "dp=1");
  nano.global_batch_tokens = 64 * 64;
  for (PlanRequest r : {small_h100_request(), nano}) {
    const ModelCounts counts = count_model(r.model);
    for (const char* activation : {"keep", "recompute"})
      for (const char* layout : {"dp=8,tp=2", "dp=2,tp=2,pp=4", "dp=2,pp=4,vp=2,ep=2",
                                 "dp=4,pp=2,ep=2,cp=2", "dp=1,tp=2,pp=8,ep=2"}) {
        r.activation = activation;
        r.layout = parse_layout(layout);
        r.layout.sequence_parallel = r.layout.tp > 1;
        const std::string what = r.cluster.name + " " + layout + " " + activation;
        const Plan floor = detail::memory_floor(r);
        const Plan plan = make_plan(r, counts, /*every_memory_rank=*/false);
        ASSERT_EQ(floor.memory.size(), plan.memory.size()) << what;
        for (size_t i = 0; i < plan.memory.size(); ++i) {
          const MemoryPart &f = floor.memory[i], &p = plan.memory[i];
          EXPECT_EQ(f.name, p.name) << what;
          EXPECT_EQ(f.host, p.host) << what;
          if (p.name == "activations" || p.name == "communication buffers")
            EXPECT_EQ(f.bytes, p.bytes) << what << ": " << p.name;
          else
            EXPECT_EQ(f.bytes, 0.0) << what << ": " << p.name;
        }
        EXPECT_GT(floor.hbm_bytes(), 0.0) << what;
        EXPECT_LE(floor.hbm_bytes(), plan.hbm_bytes()) << what;
        PlanRequest tight = r;
        tight.cluster.hbm_bytes = std::nextafter(floor.hbm_bytes(), 0.0);
        EXPECT_FALSE(detail::memory_floor(tight).fits()) << what;
        EXPECT_FALSE(make_plan(tight, counts, /*every_memory_rank=*/false).fits()) << what;
      }
  }
}

// The candidates passed over by their step bound or their memory floor change nothing: the same
// layouts, figures and memory (or the same refusal) as when every candidate is screened.
TEST(Planner, SearchPassesOverOnlyLayoutsThatCannotRankAmongTheFastest) {
  PlanRequest r;
  r.model = model::load_model_config(testing::source_dir() + "/configs/k3-small.json");
  r.cluster = cluster_preset("H100");
  r.activation = "recompute";
  auto same_search = [&r](int64_t gpus, size_t top, size_t& passed_over) {
    std::vector<Plan> all, bounded;
    const std::string refused =
        testing::error_of([&] { all = detail::search_layouts(r, gpus, top, /*bounded=*/false); });
    EXPECT_EQ(testing::error_of([&] {
                bounded = detail::search_layouts(r, gpus, top, /*bounded=*/true, &passed_over);
              }),
              refused);
    ASSERT_EQ(bounded.size(), all.size()) << gpus;
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(bounded[i].request.layout.str(), all[i].request.layout.str()) << gpus << " " << i;
      EXPECT_EQ(bounded[i].step_seconds, all[i].step_seconds) << gpus << " " << i;
      EXPECT_EQ(bounded[i].hbm_bytes(), all[i].hbm_bytes()) << gpus << " " << i;
      EXPECT_EQ(bounded[i].worst_pp_rank, all[i].worst_pp_rank) << gpus << " " << i;
    }
  };
  size_t passed_over = 0;
  for (const auto& [gpus, global_batch, top] : {std::tuple{64, int64_t{0}, size_t{2}},
                                                {64, int64_t{0}, size_t{10}},
                                                {64, int64_t{2048 * 256}, size_t{3}},
                                                {64, int64_t{2048 * 256}, size_t{10}},
                                                {128, int64_t{0}, size_t{1}}}) {
    r.global_batch_tokens = global_batch;
    same_search(gpus, top, passed_over);
  }
  EXPECT_GT(passed_over, 0u);  // the bounds spared some
  // GPUs that some layouts' activations overflow alone, and so many layouts shown that no step
  // bound passes any over: the memory floors pass those over.
  r.activation = "keep";
  r.global_batch_tokens = 2048 * 256;
  PlanRequest middle = r;
  middle.layout = parse_layout("dp=8,tp=2,pp=4");
  middle.layout.sequence_parallel = true;
  r.cluster.hbm_bytes = detail::memory_floor(middle).hbm_bytes();
  passed_over = 0;
  same_search(64, 1000, passed_over);
  EXPECT_GT(passed_over, 0u);
}

// The H800 is the H100 with NVLink cut to 200 GB/s a direction: the same layout holds the same
// memory and moves the same bytes, in 2.25 times the NVLink time. The A100 has neither the
// compute nor the scale-out of either.
TEST(Planner, TheH800DiffersFromTheH100InNVLinkAlone) {
  PlanRequest r = small_h100_request();
  r.layout = parse_layout("dp=4,tp=8");
  const Plan h100 = make_plan(r);
  r.cluster = cluster_preset("h800");
  const Plan h800 = make_plan(r);
  EXPECT_EQ(h800.hbm_bytes(), h100.hbm_bytes());
  EXPECT_EQ(h800.comm_bytes(), h100.comm_bytes());
  EXPECT_EQ(h800.compute_seconds, h100.compute_seconds);
  EXPECT_EQ(h800.ib_seconds, h100.ib_seconds);
  ASSERT_GT(h100.nvlink_seconds, 0);
  EXPECT_NEAR(h800.nvlink_seconds / h100.nvlink_seconds, 450.0 / 200.0, 1e-9);
  r.cluster = cluster_preset("A100");
  const Plan a100 = make_plan(r);
  // Each part slower by its own figure: the attention cores by the tensor cores' (989 / 312), the
  // elementwise work by HBM's (3.35 / 2.039 TB/s), the GEMMs by at least HBM's (fewer SMs too).
  EXPECT_NEAR(a100.micro_batch.attention_seconds / h100.micro_batch.attention_seconds,
              989.0 / 312.0, 1e-9);
  EXPECT_NEAR(a100.micro_batch.elementwise_seconds / h100.micro_batch.elementwise_seconds,
              3.35 / 2.039, 1e-9);
  EXPECT_GE(a100.micro_batch.gemm_seconds / h100.micro_batch.gemm_seconds, 3.35 / 2.039);
  EXPECT_GT(a100.ib_seconds, h100.ib_seconds);
}

TEST(Planner, RefusesWhatDoesNotSplit) {
  PlanRequest r = cpu_request("dense-tiny.json", "dp=3");
  r.global_batch_tokens = 64 * 4;
  EXPECT_THROW(make_plan(r), Error);
  EXPECT_THROW(parse_layout("dp=2,xp=2"), Error);
  EXPECT_THROW(parse_layout("dp=0"), Error);
  EXPECT_THROW(parse_layout("tp"), Error);
  EXPECT_THROW(cluster_preset("V100"), Error);
}

// Sizes whose product overflows, repeated or empty parts, and settings outside their bounds are
// refused in one line naming the field, before any arithmetic on them.
TEST(Planner, RefusesSizesAndSettingsOutOfBounds) {
  auto error_of_layout = [](const std::string& text) {
    return testing::error_of([&] { parse_layout(text); });
  };
  EXPECT_NE(error_of_layout("dp=4294967296,tp=4294967296").find("dp='4294967296' is not a whole"),
            std::string::npos);
  EXPECT_NE(error_of_layout("dp=1024,tp=1024,pp=2").find("takes more than 1048576 GPUs"),
            std::string::npos);
  EXPECT_NE(error_of_layout("dp=8,dp=8").find("dp is given twice"), std::string::npos);
  EXPECT_NE(error_of_layout(",,,").find("an empty part"), std::string::npos);
  EXPECT_NE(error_of_layout("dp=8,").find("an empty part"), std::string::npos);
  EXPECT_EQ(parse_layout("dp=1024,tp=8,pp=16,ep=8").gpus(), 1 << 20);

  // A request built without parse_layout is checked the same way.
  PlanRequest r = cpu_request("dense-tiny.json", "dp=2");
  r.layout.dp = r.layout.tp = int64_t{1} << 32;
  EXPECT_NE(testing::error_of([&] { make_plan(r); }).find("dp=4294967296 is not in [1, 1048576]"),
            std::string::npos);
  auto error_of_plan = [&](auto&& change) {
    PlanRequest q = cpu_request("dense-tiny.json", "dp=2");
    change(q);
    return testing::error_of([&] { make_plan(q); });
  };
  for (double e : {0.0, -0.5, 1.5, std::nan(""), HUGE_VAL})
    EXPECT_NE(
        error_of_plan([&](PlanRequest& q) { q.gemm_ceiling = e; }).find(": must be in (0, 1]"),
        std::string::npos)
        << e;
  EXPECT_NE(error_of_plan([](PlanRequest& q) {
              q.seq = int64_t{1} << 40;
            }).find("--seq 1099511627776: must be in [1, 16777216] tokens"),
            std::string::npos);
  EXPECT_NE(error_of_plan([](PlanRequest& q) {
              q.micro_rows = int64_t{1} << 30;
            }).find("--micro-batch 1073741824"),
            std::string::npos);
  EXPECT_NE(error_of_plan([](PlanRequest& q) {
              q.global_batch_tokens = -64;
            }).find("--global-batch -64: must be in"),
            std::string::npos);
  EXPECT_NE(error_of_plan([](PlanRequest& q) {
              q.global_batch_tokens = 64 * 2 * 65537;
            }).find("65537 micro-batches a step, more than 65536"),
            std::string::npos);
  // The search refuses them once instead of finding that no candidate plans.
  PlanRequest s = cpu_request("dense-tiny.json", "dp=1");
  s.gemm_ceiling = 0;
  EXPECT_NE(testing::error_of([&] { search_layouts(s, 4, 1); }).find("--gemm-ceiling 0"),
            std::string::npos);
  s.gemm_ceiling = kGemmCeiling;
  EXPECT_NE(testing::error_of([&] {
              search_layouts(s, int64_t{1} << 21, 1);
            }).find("--gpus 2097152: must be in [1, 1048576]"),
            std::string::npos);
}

}  // namespace
}  // namespace k3::planner
