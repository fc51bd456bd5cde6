#include "k3/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/model/inventory.h"
#include "k3/model/layer_factory.h"
#include "k3/planner/plan_internal.h"
#include "k3/train/config/parallel.h"
#include "k3/train/session.h"

namespace k3::planner {

double pipeline_bubble(const std::string& schedule, int64_t pp, int64_t vp, int64_t micro_batches) {
  const double m = static_cast<double>(micro_batches), p = static_cast<double>(pp);
  if (schedule == "dualpipe") return (p - 2) / (3 * m);
  return (p - 1) / (static_cast<double>(vp) * m);
}

BytesPerParam bytes_per_param(const Precision& p, double state_bytes, int zero, int64_t dp) {
  const double shards = static_cast<double>(dp);
  return {p.weight, zero >= 1 ? p.master / shards : p.master,
          zero >= 2 ? p.gradient / shards : p.gradient,
          zero >= 1 ? state_bytes / shards : state_bytes};
}

double Transfer::wire_bytes() const {
  const double n = static_cast<double>(group_size), share = (n - 1) / n;
  switch (op) {
    case dist::Op::all_reduce:
      return 2 * share * bytes;  // ring: reduce-scatter + all-gather
    case dist::Op::reduce_scatter:
    case dist::Op::all_gather:
    case dist::Op::all_to_all:
      return share * bytes;  // the payload less this rank's own block
    case dist::Op::broadcast:
    case dist::Op::send:
      return bytes;
    default:
      return 0;  // a receive comes in on the other direction, beside the sends
  }
}

double Plan::hbm_bytes() const {
  double b = 0;
  for (const MemoryPart& m : memory) b += m.host ? 0 : m.bytes;
  return b;
}

double Plan::host_bytes() const {
  double b = 0;
  for (const MemoryPart& m : memory) b += m.host ? m.bytes : 0;
  return b;
}

bool Plan::fits() const {
  const Cluster& c = request.cluster;
  const double gpus_on_node =
      static_cast<double>(std::min<int64_t>(c.gpus_per_node, request.layout.gpus()));
  return hbm_bytes() <= c.hbm_bytes && host_bytes() * gpus_on_node <= c.host_bytes;
}

double Plan::comm_bytes() const {
  double b = 0;
  for (const Transfer& t : traffic) b += t.bytes;
  return b;
}

double Plan::comm_bytes(const std::string& group) const {
  double b = 0;
  for (const Transfer& t : traffic) b += t.group == group ? t.bytes : 0;
  return b;
}

double Plan::tokens_per_second() const {
  return static_cast<double>(sequences * request.seq) / step_seconds;
}

void detail::check_settings(const PlanRequest& r) {
  K3_CHECK(r.layout.zero >= 0 && r.layout.zero <= 2, "--zero ", r.layout.zero, ": one of 0, 1, 2");
  K3_CHECK(r.optimizer == "muon" || r.optimizer == "adamw", "--optimizer '", r.optimizer,
           "': one of muon, adamw");
  K3_CHECK(r.layout.moonep_slots >= 0 && r.layout.moonep_slots <= kMaxGpus, "--moonep-slots ",
           r.layout.moonep_slots, ": must be in [0, ", kMaxGpus, "]");
  K3_CHECK(std::isfinite(r.gemm_ceiling) && r.gemm_ceiling > 0 && r.gemm_ceiling <= 1,
           "--gemm-ceiling ", r.gemm_ceiling, ": must be in (0, 1]");
  K3_CHECK(r.schedule == "1f1b" || r.schedule == "dualpipe", "--schedule '", r.schedule,
           "': one of 1f1b, dualpipe");
  K3_CHECK(!r.fp8 || r.cluster.peak_fp8_flops > 0, "--gemm fp8: the ", r.cluster.name,
           " has no FP8 tensor cores");
  K3_CHECK(r.seq >= 1 && r.seq <= kMaxMicroBatchTokens, "--seq ", r.seq, ": must be in [1, ",
           kMaxMicroBatchTokens, "] tokens");
  K3_CHECK(r.micro_rows >= 1 && r.micro_rows <= kMaxMicroBatchTokens / r.seq, "--micro-batch ",
           r.micro_rows, ": ", r.micro_rows, " x --seq ", r.seq, " is not in [1, ",
           kMaxMicroBatchTokens, "] tokens a reader holds at once");
  K3_CHECK(r.global_batch_tokens >= 0 && r.global_batch_tokens <= kMaxStepTokens, "--global-batch ",
           r.global_batch_tokens, ": must be in [0, ", kMaxStepTokens, "] tokens");
}

namespace {

void check_request(const PlanRequest& r) {
  const Layout& l = r.layout;
  const model::ModelConfig& c = r.model;
  detail::check_settings(r);
  check_layout_sizes(l);
  K3_CHECK(l.cp == 1 || r.seq % (2 * l.cp) == 0, "--seq ", r.seq,
           " does not cut into 2·cp = ", 2 * l.cp, " zig-zag chunks");
  K3_CHECK(l.ep == 1 || (c.num_experts > 0 && c.num_experts % l.ep == 0), "--layout: ep=", l.ep,
           " does not divide the model's ", c.num_experts, " routed experts");
  K3_CHECK(l.pp * l.vp <= c.num_hidden_layers, "--layout: pp·vp = ", l.pp * l.vp, " stages for ",
           c.num_hidden_layers, " layers");
  K3_CHECK(!l.moonep || l.ep > 1, "--moe-dispatch moonep needs expert parallelism (ep > 1)");
  K3_CHECK(r.schedule != "dualpipe" || (l.pp >= 2 && l.pp % 2 == 0 && l.vp == 1),
           "--schedule dualpipe: needs an even pp of at least 2 and vp = 1 (the layout has pp=",
           l.pp, ", vp=", l.vp, ")");
  model::check_tensor_parallel(c, static_cast<int>(l.tp));
}

// Sequences per step, and micro-batches per reader.
std::pair<int64_t, int64_t> batch_shape(const PlanRequest& r) {
  const int64_t per_micro = r.layout.dp * r.layout.ep * r.micro_rows;
  if (r.global_batch_tokens == 0) {
    K3_CHECK(r.schedule != "dualpipe",
             "--schedule dualpipe: give --global-batch (one micro-batch"
             " a step leaves nothing to feed from the other end)");
    return {per_micro, 1};
  }
  K3_CHECK(r.global_batch_tokens % r.seq == 0, "--global-batch ", r.global_batch_tokens,
           " tokens is not a whole number of --seq ", r.seq, " sequences");
  const int64_t sequences = r.global_batch_tokens / r.seq;
  K3_CHECK(sequences % per_micro == 0, "--global-batch: ", sequences,
           " sequences do not split over dp·ep = ", r.layout.dp * r.layout.ep,
           " readers of --micro-batch ", r.micro_rows, " sequences");
  K3_CHECK(sequences / per_micro <= kMaxMicroBatches, "--global-batch: ", sequences / per_micro,
           " micro-batches a step, more than ", kMaxMicroBatches,
           " (a larger --micro-batch takes fewer)");
  const int64_t m = sequences / per_micro;
  K3_CHECK(r.schedule != "dualpipe" || (m % 2 == 0 && m >= r.layout.pp), "--schedule dualpipe: ", m,
           " micro-batches a step; it feeds half from each end, at least pp = ", r.layout.pp,
           " and an even number");
  return {sequences, sequences / per_micro};
}

}  // namespace

namespace detail {

train::RunConfig run_config(const PlanRequest& r, int64_t micro_batches) {
  train::RunConfig c;
  const Layout& l = r.layout;
  train::ParallelSection& p = c.parallel;
  p.dp = l.dp, p.tp = l.tp, p.pp = l.pp, p.vp = l.vp, p.ep = l.ep, p.cp = l.cp;
  p.zero = l.zero;
  p.sequence_parallel = l.sequence_parallel && l.tp > 1;
  p.moe_dispatch = l.moonep ? "moonep" : "alltoall";
  p.moonep_slots = l.moonep_slots;
  p.bucket_mib = r.bucket_mib;
  if (l.pp > 1) {  // the remainder one layer each to the stages after the first
    const int64_t stages = l.pp * l.vp, layers = r.model.num_hidden_layers;
    for (int64_t s = 0; s < stages; ++s) {
      if (s > 0) p.pp_layers += ',';
      p.pp_layers += std::to_string(layers / stages + (s >= 1 && s <= layers % stages ? 1 : 0));
    }
  }
  c.train.batch_size = l.dp * l.ep * r.micro_rows;
  c.train.grad_accum = micro_batches;
  c.train.optimizer = r.optimizer;
  c.data.seq_len = r.seq;
  // The estimate is in fp32 and the memory parts re-express it in the cluster's activation
  // precision: where that is bf16 already, storing activations in bf16 is keeping them.
  c.activation.policy =
      r.activation == "bf16" && r.cluster.precision.activation == 2 ? "keep" : r.activation;
  return c;
}

std::unique_ptr<model::Model> describe_rank(const PlanRequest& r, const train::RunConfig& c,
                                            int pp_rank) {
  const Layout& l = r.layout;
  return std::make_unique<model::Model>(
      r.model,
      model::GroupPlaces{{"tp", {static_cast<int>(l.tp), 0}},
                         {"ep", {static_cast<int>(l.ep), 0}},
                         {"pp", {static_cast<int>(l.pp), pp_rank}}},
      train::pipeline_split(c.parallel, r.model.num_hidden_layers), c.parallel.sequence_parallel);
}

std::vector<MemoryPart> memory_parts(const PlanRequest& r, const train::RunMemory& m) {
  const Precision& p = r.cluster.precision;
  const Layout& l = r.layout;
  const double n = m.model.parameter_bytes / sizeof(float);  // this rank's values (flat buffer)
  std::vector<MemoryPart> parts;
  if (r.cluster.is_cpu) {  // k3lab's own run: the estimate as it stands
    parts.push_back({"weights", m.model.parameter_bytes, false, "fp32 flat buffer"});
    parts.push_back({"gradients", m.model.gradient_bytes, false, "fp32 flat buffer"});
  } else {
    const BytesPerParam b = bytes_per_param(p, 0, l.zero, l.dp);
    parts.push_back({"weights", n * b.weight, false, "bf16 working copy"});
    parts.push_back({"master weights", n * b.master, r.optimizer_on_host,
                     l.zero >= 1 ? "fp32, sharded over dp (ZeRO)" : "fp32"});
    parts.push_back(
        {"gradients", n * b.gradient, true,
         l.zero >= 2 ? "fp32, sharded over dp (ZeRO-2), host memory" : "fp32, host memory"});
  }
  const bool host = r.optimizer_on_host && !r.cluster.is_cpu;
  parts.push_back(
      {"optimizer states", m.optimizer_state, host,
       strprintf("fp32: AdamW m+v of %lld values, Muon momentum of %lld%s",
                 static_cast<long long>(m.adamw_values), static_cast<long long>(m.muon_values),
                 l.zero >= 1 ? ", sharded over dp" : "")});
  parts.push_back({"optimizer scratch", m.optimizer_workspace, host,
                   "Muon's packed blocks and Newton-Schulz work"});
  parts.push_back(
      {"activations", m.model.activation_bytes * p.activation / 4, false,
       strprintf("%s, %d micro-batch chunk%s in flight of %lld x %lld tokens%s%s",
                 r.activation.c_str(), m.layout.in_flight, m.layout.in_flight == 1 ? "" : "s",
                 static_cast<long long>(m.layout.rows), static_cast<long long>(m.layout.tokens),
                 l.cp > 1 ? ", KCP and ring buffers" : "", l.moonep ? ", MoonEP replicas" : "")});
  parts.push_back(
      {"expert balancing", m.model.balancing_bytes, false, "Quantile Balancing histograms"});
  if (!r.cluster.is_cpu) {
    const model::ModelConfig& c = r.model;
    const double rows =
        static_cast<double>(m.layout.rows * m.layout.tokens * c.num_experts_per_token);
    const double a2a =
        l.ep > 1 ? 2 * rows * static_cast<double>(c.routed_expert_hidden_size) * p.activation : 0;
    parts.push_back({"communication buffers", 2 * r.bucket_mib * 1024 * 1024 + a2a, false,
                     "two gradient buckets in flight, one MoE layer's all-to-all send + receive"});
  }
  if (r.schedule == "dualpipe") {  // two stages a GPU, one from each end; pp + 1 in flight
    model::ActivationLayout dual = m.layout;
    dual.in_flight = static_cast<int>(l.pp + 1);
    for (MemoryPart& part : parts) {
      if (part.name == "activations") {
        part.bytes = model::activation_bytes(r.model, dual) * p.activation / 4;
        part.detail += strprintf(", DualPipe: %d in flight", dual.in_flight);
      } else if (part.name != "communication buffers" && part.name != "expert balancing") {
        part.bytes *= 2;
        part.detail += ", DualPipe: two stages";
      }
    }
  }
  return parts;
}

}  // namespace detail

ModelCounts count_model(const model::ModelConfig& c) {
  const model::Model m(c, /*allocate=*/false);
  return {model::parameter_counts(m), model::weight_products(m)};
}

double ModelCounts::values_per_gpu(const Layout& l) const {
  double experts = 0;
  for (const model::ComponentCount& cc : params)
    if (cc.component.ends_with("moe.routed_experts")) experts += static_cast<double>(cc.total);
  const double dense = static_cast<double>(params.back().total) - experts;
  return dense / static_cast<double>(l.tp * l.pp) +
         experts / static_cast<double>(l.tp * l.ep * l.pp);
}

Plan make_plan(const PlanRequest& r) { return make_plan(r, count_model(r.model)); }

Plan make_plan(const PlanRequest& r, const ModelCounts& counts, bool every_memory_rank) {
  detail::DescribedRanks described;
  return detail::make_plan(r, counts, every_memory_rank, described);
}

namespace {

// What the roofline reads beside the transfers: the parameter counts and the bubble.
void step_without_traffic(Plan& plan, const ModelCounts& counts) {
  const PlanRequest& r = plan.request;
  const Layout& l = r.layout;
  plan.params_total = counts.params.back().total;
  plan.params_active = counts.params.back().active;
  for (const model::ComponentCount& cc : counts.params)  // the model's and an MTP module's copy
    if (cc.component.ends_with("embedding")) plan.params_embedding += cc.total;
  plan.bubble = l.pp > 1 ? pipeline_bubble(r.schedule, l.pp, l.vp, plan.micro_batches) : 0;
}

// Pipeline rank RANK's memory, the plan's when it is rank 0's or needs more than the plan's.
void weigh_memory_rank(Plan& plan, const train::RunConfig& c, int rank,
                       detail::DescribedRanks& described) {
  const PlanRequest& r = plan.request;
  std::shared_ptr<const model::Model>& d = described[rank];
  if (!d) d = detail::describe_rank(r, c, rank);
  std::vector<MemoryPart> parts = detail::memory_parts(r, train::estimate_run_memory(*d, c, 0));
  auto sum = [](const std::vector<MemoryPart>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0,
                           [](double s, const MemoryPart& m) { return s + m.bytes; });
  };
  if (rank == 0 || sum(parts) > sum(plan.memory)) {
    plan.memory = std::move(parts);
    plan.worst_pp_rank = rank;
  }
}

}  // namespace

void detail::add_memory_ranks(Plan& plan, DescribedRanks& described) {
  const int last = static_cast<int>(plan.request.layout.pp) - 1;
  const train::RunConfig c = detail::run_config(plan.request, plan.micro_batches);
  for (int rank : std::set<int>{std::min(1, last), last})
    if (rank > 0) weigh_memory_rank(plan, c, rank, described);
}

Plan detail::make_plan(const PlanRequest& r, const ModelCounts& counts, bool every_memory_rank,
                       DescribedRanks& described) {
  return detail::make_plan(detail::memory_floor(r), counts, every_memory_rank, described);
}

Plan detail::make_plan(Plan floor, const ModelCounts& counts, bool every_memory_rank,
                       DescribedRanks& described) {
  Plan plan = std::move(floor);
  const train::RunConfig c = detail::run_config(plan.request, plan.micro_batches);
  // Memory: the pipeline rank needing the most of the first (the embedding, the most
  // micro-batches in flight), the second (the first given a remainder layer) and the last (the
  // head); traffic: the lead's (pp rank 0).
  weigh_memory_rank(plan, c, 0, described);  // in place of the floor's parts
  if (every_memory_rank) detail::add_memory_ranks(plan, described);
  plan.traffic = detail::step_traffic(plan.request, *described.at(0), plan.micro_batches);
  step_without_traffic(plan, counts);
  detail::roofline(plan, counts);
  return plan;
}

Plan detail::memory_floor(const PlanRequest& r) {
  check_request(r);
  Plan floor;
  floor.request = r;
  std::tie(floor.sequences, floor.micro_batches) = batch_shape(r);
  // The pipeline schedule first: a batch it does not admit (the interleaved schedule's fewer
  // micro-batches than pp) is refused before any rank is described, which takes far longer.
  train::RunMemory m;  // as estimate_run_memory makes rank 0's, without its parameters
  m.layout = train::activation_layout(detail::run_config(r, floor.micro_batches), r.model, 0);
  m.model.activation_bytes = model::activation_bytes(r.model, m.layout);
  floor.memory = detail::memory_parts(r, m);
  return floor;
}

double detail::step_bound(const PlanRequest& r, const ModelCounts& counts) {
  Plan plan;
  plan.request = r;
  std::tie(plan.sequences, plan.micro_batches) = batch_shape(r);
  step_without_traffic(plan, counts);
  detail::roofline(plan, counts);  // no transfers: compute, bubble and optimizer alone
  return plan.step_seconds;
}

}  // namespace k3::planner
