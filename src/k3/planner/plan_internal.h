// The planner's parts, shared between its files: the run configuration a request stands for and
// the ranks it describes, the memory and traffic of one pipeline rank, the roofline.
#pragma once

#include <map>
#include <memory>

#include "k3/model/model.h"
#include "k3/planner/plan.h"
#include "k3/train/config/run_config.h"
#include "k3/train/preflight/preflight.h"

namespace k3::planner::detail {

// Throws one line unless the settings beside the layout (ZeRO, optimizer, MoonEP slots, efficiency,
// sequence and batch sizes) lie in their bounds.
void check_settings(const PlanRequest& r);

// The request as a k3lab run configuration: train.batch_size = dp·ep·micro_rows sequences per
// micro-batch, train.grad_accum = m, the layers as evenly over pp·vp stages as they go.
train::RunConfig run_config(const PlanRequest& r, int64_t micro_batches);

// What pipeline rank PP_RANK holds (its tp and ep shards), without allocating.
std::unique_ptr<model::Model> describe_rank(const PlanRequest& r, const train::RunConfig& c,
                                            int pp_rank);

// The described ranks a plan reads, by pipeline rank. What a rank holds depends on tp, ep, pp, vp
// and sequence parallelism only, so a search shares them between layouts that differ in dp and
// cp; a plan describes the ranks missing here and adds them.
using DescribedRanks = std::map<int, std::shared_ptr<const model::Model>>;
Plan make_plan(const PlanRequest& r, const ModelCounts& counts, bool every_memory_rank,
               DescribedRanks& described);
// The same from the request's memory floor (memory_floor).
Plan make_plan(Plan floor, const ModelCounts& counts, bool every_memory_rank,
               DescribedRanks& described);

// The step time of the request's compute, bubble and optimizer alone, as the roofline adds them
// up before the exposed transfers: no plan of the request takes less (a sum of more terms, none
// negative, rounds to no less). Throws as make_plan does where the batch does not split.
double step_bound(const PlanRequest& r, const ModelCounts& counts);

// The request's plan as far as it goes without a described rank: its batch, and as its memory
// pipeline rank 0's parts that need none (its activations and the communication buffers, every
// part that follows from the parameters 0: their values, gradients, optimizer states and scratch,
// the balancing histograms). No part of the plan is smaller, so where these do not fit, the plan
// does not. Throws as make_plan does where the request or its batch is refused.
Plan memory_floor(const PlanRequest& r);

// search_layouts; bounded false: every candidate screened, none passed over by its step bound or
// its memory floor. passed_over: where to count those passed over.
std::vector<Plan> search_layouts(const PlanRequest& r, int64_t gpus, size_t top, bool bounded,
                                 size_t* passed_over = nullptr);

// The memory ranks beyond 0 (the second and the last) weighed into a plan made with rank 0's
// alone (every_memory_rank false): the plan make_plan gives with every memory rank.
void add_memory_ranks(Plan& plan, DescribedRanks& described);

// One GPU's memory by part, from the run's estimate for that rank.
std::vector<MemoryPart> memory_parts(const PlanRequest& r, const train::RunMemory& m);

// The lead rank's transfers in one step of m micro-batches.
std::vector<Transfer> step_traffic(const PlanRequest& r, const model::Model& lead, int64_t m);

// The roofline: compute, bubble, the optimizer, communication by link class, the exposed part,
// step and MFU. Before the traffic is known (no transfers): the compute, bubble and optimizer.
void roofline(Plan& p, const ModelCounts& counts);

}  // namespace k3::planner::detail
