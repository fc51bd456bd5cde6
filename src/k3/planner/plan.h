// The planner: what one training step of a model takes on a cluster in a given layout, per GPU,
// before anything runs: parameters, memory by part and where it lives, the bytes of every
// collective by process group and link class, the pipeline bubble, and a roofline's step time
// and MFU. The formulas are math §10's; docs/planner.md states every assumption.
//
// Memory comes from the run's own pre-flight estimate (train/preflight/memory_estimate.h: the
// registry of each pipeline rank described without allocation, the activation estimate of the
// layout and policy), re-expressed in the cluster's precision. The bytes are counted as
// dist/comm.h's counters count a payload, for the lead rank (every grid coordinate 0), so that on
// the "cpu" preset a plan equals what an MPI run of k3lab measures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/model/config.h"
#include "k3/model/inventory.h"
#include "k3/planner/cluster.h"
#include "k3/planner/efficiency.h"
#include "k3/planner/layout.h"

namespace k3::planner {

// One MoE layer's routing in one step, as a run measured it (RUN_DIR/expert_load.jsonl): the rows
// its tokens routed to the lead ep rank's experts over the step, and under MoonEP the loads each
// micro-batch's plan was made from (each expert's rows over the ep group, experts × micro-batches).
struct MoeRouting {
  int64_t home_rows = 0;
  std::vector<int64_t> plan_loads;
};

// Bounds of a request: the tokens of one reader's micro-batch (--seq times --micro-batch) and of
// a step (--global-batch), the micro-batches of a step, far beyond any run, and within what the
// counts of tokens, bytes and FLOPs hold exactly.
constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 24;
constexpr int64_t kMaxStepTokens = int64_t{1} << 40;
constexpr int64_t kMaxMicroBatches = int64_t{1} << 16;  // a step's, per reader

struct PlanRequest {
  model::ModelConfig model;
  Cluster cluster;
  Layout layout;
  std::string activation =
      "keep";  // the saved activations' policy: keep, recompute, fp8, offload, bf16
  std::string optimizer = "muon";      // muon (K3's parameter groups) or adamw
  int64_t seq = 8192;                  // tokens per sequence
  int64_t global_batch_tokens = 0;     // per step; 0: one micro-batch per reader (dp·ep)
  int64_t micro_rows = 1;              // sequences per reader in one micro-batch
  double gemm_ceiling = kGemmCeiling;  // the share of peak a large GEMM reaches
  bool fp8 = false;                    // the weight products' GEMMs in fp8 (fine-grained scaling)
  std::string schedule = "1f1b";       // 1f1b (interleaved when vp > 1) or dualpipe
  // The ep group's all-to-alls overlapped with compute (another micro-batch's, as DualPipe and
  // Megatron's merged forward-backward 1F1B schedule them); DualPipe always overlaps them.
  bool ep_overlap = false;
  double bucket_mib = 4;           // the gradient reduction's bucket
  bool optimizer_on_host = false;  // master weights and optimizer states in host memory
  // By decoder layer; empty: balanced routing (every ep rank computes its share of the rows,
  // and MoonEP fills every replica slot).
  std::map<int64_t, MoeRouting> routing;
};

// The routing of step `step` (< 0: the last) of a run's expert-load records (`--routing`,
// `--routing-step`); throws one line naming what is missing.
std::map<int64_t, MoeRouting> read_routing(const std::string& expert_load_jsonl, int64_t step);

struct MemoryPart {
  std::string name;
  double bytes = 0;
  bool host = false;  // in the node's host memory instead of the GPU's
  std::string detail;
};

struct Transfer {
  std::string group;  // tp, cp, ep, dp, pp, replica
  dist::Op op = dist::Op::all_reduce;
  std::string what;
  double bytes = 0;  // payload, as dist/comm.h counts it
  int64_t group_size = 1;
  bool across_nodes = false;  // InfiniBand; otherwise NVLink (or shared memory)
  double wire_bytes() const;  // what the rank's link carries (ring algorithms)
};

struct Plan {
  PlanRequest request;
  int64_t params_total = 0, params_active = 0;
  int64_t params_embedding = 0;  // a lookup, not a product: left out of the FLOPs
  int64_t sequences = 0;         // per step
  int64_t micro_batches = 0;     // m, per reader and step
  int worst_pp_rank = 0;         // the pipeline rank whose memory is shown
  std::vector<MemoryPart> memory;
  std::vector<Transfer> traffic;  // the lead rank's, one step
  double bubble = 0;              // idle over busy: pipeline_bubble of the schedule
  double model_flops = 0;         // one step, all GPUs: 6·N_active·D plus attention
  MicroBatchCompute micro_batch;  // one GPU's, its stage's share of the layers
  // compute: the m micro-batches' (the bubble idles its share of it); optimizer: the update's.
  double compute_seconds = 0, bubble_seconds = 0, optimizer_seconds = 0;
  double nvlink_seconds = 0, ib_seconds = 0;
  double exposed_comm_seconds = 0, step_seconds = 0, mfu = 0;

  double hbm_bytes() const;
  double host_bytes() const;  // per GPU
  bool fits() const;          // HBM per GPU and host memory per node
  double comm_bytes() const;  // payload bytes of every transfer
  double comm_bytes(const std::string& group) const;
  double tokens_per_second() const;
};

// Checks the request (sizes and batch within bounds, sizes divide, the batch splits) and plans it;
// throws one line naming what is wrong.
Plan make_plan(const PlanRequest& r);
// What the planner reads of a model beside its configuration (model/inventory.h): its parameter
// counts by component (the last is the total) and its weight products.
struct ModelCounts {
  std::vector<model::ComponentCount> params;
  std::vector<model::WeightProduct> products;
  // The values one GPU holds under L, balanced: the routed experts (a multi-token prediction
  // module's too) over tp·ep·pp, every other parameter over tp·pp.
  double values_per_gpu(const Layout& l) const;
};
ModelCounts count_model(const model::ModelConfig& c);
// make_plan with the model counted; every_memory_rank false: the memory of pipeline rank 0 alone
// (a screening).
Plan make_plan(const PlanRequest& r, const ModelCounts& counts, bool every_memory_rank = true);

// Every layout of `gpus` GPUs the model admits (tp and cp within a node, ep dividing the
// experts, pp·vp dividing into the layers), planned with the request's other settings; those that
// fit memory, fastest first, at most `top`.
std::vector<Plan> search_layouts(const PlanRequest& r, int64_t gpus, size_t top);

// math §10. The pipeline bubble, idle over busy, of the interleaved 1F1B schedule (v = 1: plain
// 1F1B): (p − 1)/(v·m); of DualPipe, (p/2 − 1)(F&B + B − 3W)/(m(F + B)) with a backward B twice
// the forward F, its weight part W equal to F, and an overlapped forward-and-backward chunk F&B
// taking F + B: (p − 2)/(3m).
double pipeline_bubble(const std::string& schedule, int64_t pp, int64_t vp, int64_t micro_batches);

// Bytes each trained parameter takes per GPU under a ZeRO stage over dp ranks.
struct BytesPerParam {
  double weight = 0, master = 0, gradient = 0, state = 0;
  double total() const { return weight + master + gradient + state; }
};
BytesPerParam bytes_per_param(const Precision& p, double state_bytes, int zero, int64_t dp);

}  // namespace k3::planner
