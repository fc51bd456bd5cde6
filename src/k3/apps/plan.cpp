// `k3lab plan --model CONFIG --cluster PRESET --layout dp=..,tp=..,pp=..,vp=..,ep=..,cp=..`: what
// one training step takes per GPU in that layout, before anything runs: memory by part, the
// bytes of each collective by group and link class, the pipeline bubble, a roofline's step time
// and MFU (docs/planner.md). --search ranks every layout of the GPU count that fits; --json
// prints one object.
#include "k3/planner/plan.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "k3/activation/policy.h"
#include "k3/apps/commands.h"
#include "k3/apps/number_option.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/model/config.h"
#include "k3/train/observe/expert_load.h"

namespace k3::apps {
namespace {

using planner::Plan;

// 2.81e12 -> "2.81T": counts of parameters and tokens.
std::string count(double n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) n /= 1000, ++u;
  return strprintf("%.3g%s", n, units[u]);
}

nlohmann::json plan_json(const Plan& p) {
  nlohmann::json memory = nlohmann::json::array(), comm = nlohmann::json::array(),
                 by_group = nlohmann::json::object();
  for (const planner::MemoryPart& m : p.memory)
    memory.push_back({{"part", m.name},
                      {"bytes", m.bytes},
                      {"where", m.host ? "host" : "gpu"},
                      {"detail", m.detail}});
  for (const planner::Transfer& t : p.traffic) {
    comm.push_back({{"group", t.group},
                    {"op", dist::op_name(t.op)},
                    {"what", t.what},
                    {"bytes", t.bytes},
                    {"wire_bytes", t.wire_bytes()},
                    {"link", t.across_nodes ? "infiniband" : "nvlink"}});
    by_group[t.group] = by_group.value(t.group, 0.0) + t.bytes;
  }
  const planner::PlanRequest& r = p.request;
  return {{"model_layers", r.model.num_hidden_layers},
          {"cluster", r.cluster.name},
          {"gpus", r.layout.gpus()},
          {"layout", r.layout.str()},
          {"zero", r.layout.zero},
          {"activation", r.activation},
          {"optimizer", r.optimizer},
          {"optimizer_in", r.optimizer_on_host ? "host" : "gpu"},
          {"moe_dispatch", r.layout.moonep ? "moonep" : "alltoall"},
          {"seq", r.seq},
          {"global_batch_tokens", p.sequences * r.seq},
          {"micro_batches", p.micro_batches},
          {"params_total", p.params_total},
          {"params_active", p.params_active},
          {"memory_bytes_per_gpu", p.hbm_bytes()},
          {"host_bytes_per_gpu", p.host_bytes()},
          {"memory_pp_rank", p.worst_pp_rank},
          {"fits", p.fits()},
          {"memory", memory},
          {"comm_bytes_per_step", p.comm_bytes()},
          {"comm_bytes_by_group", by_group},
          {"comm", comm},
          {"bubble", p.bubble},
          {"model_flops_per_step", p.model_flops},
          {"schedule", r.schedule},
          {"ep_overlap", r.ep_overlap || r.schedule == "dualpipe"},
          {"gemm_precision", r.fp8 ? "fp8" : "bf16"},
          {"micro_batch_gemm_seconds", p.micro_batch.gemm_seconds},
          {"micro_batch_gemm_flops", p.micro_batch.gemm_flops},
          {"micro_batch_attention_seconds", p.micro_batch.attention_seconds},
          {"micro_batch_elementwise_seconds", p.micro_batch.elementwise_seconds},
          {"compute_seconds", p.compute_seconds},
          {"bubble_seconds", p.bubble_seconds},
          {"optimizer_seconds", p.optimizer_seconds},
          {"nvlink_seconds", p.nvlink_seconds},
          {"infiniband_seconds", p.ib_seconds},
          {"exposed_comm_seconds", p.exposed_comm_seconds},
          {"step_seconds", p.step_seconds},
          {"tokens_per_second", p.tokens_per_second()},
          {"mfu", p.mfu}};
}

void print_plan(const Plan& p) {
  const planner::PlanRequest& r = p.request;
  std::printf("%s on %lld x %s (%s)\n", r.layout.str().c_str(),
              static_cast<long long>(r.layout.gpus()), r.cluster.name.c_str(),
              r.cluster.description.c_str());
  std::printf("parameters: %s total, %s active per token\n",
              count(static_cast<double>(p.params_total)).c_str(),
              count(static_cast<double>(p.params_active)).c_str());
  std::printf(
      "step: %lld sequences of %lld tokens, %lld micro-batch%s of %lld per reader; ZeRO-%d, "
      "%s, activations %s\n",
      static_cast<long long>(p.sequences), static_cast<long long>(r.seq),
      static_cast<long long>(p.micro_batches), p.micro_batches == 1 ? "" : "es",
      static_cast<long long>(r.micro_rows), r.layout.zero, r.optimizer.c_str(),
      r.activation.c_str());
  std::printf("\nmemory per GPU (pipeline rank %d):\n", p.worst_pp_rank);
  for (const planner::MemoryPart& m : p.memory)
    std::printf("  %-22s %12s  %-4s  %s\n", m.name.c_str(), format_bytes(m.bytes).c_str(),
                m.host ? "host" : "gpu", m.detail.c_str());
  std::printf("  %-22s %12s  of %s%s\n", "total on the GPU", format_bytes(p.hbm_bytes()).c_str(),
              format_bytes(r.cluster.hbm_bytes).c_str(), p.fits() ? "" : "  DOES NOT FIT");
  std::printf("\ncommunication per step (lead rank, payload bytes):\n");
  for (const planner::Transfer& t : p.traffic)
    std::printf("  %-8s %-15s %12s  %-10s %s\n", t.group.c_str(), dist::op_name(t.op),
                format_bytes(t.bytes).c_str(), t.across_nodes ? "InfiniBand" : "NVLink",
                t.what.c_str());
  std::printf("  %-24s %12s\n", "total", format_bytes(p.comm_bytes()).c_str());
  std::printf("\npipeline bubble (%s): %.4f\n",
              r.schedule == "dualpipe" ? "DualPipe, (p-2)/(3m)" : "(p-1)/(v*m)", p.bubble);
  const planner::MicroBatchCompute& mb = p.micro_batch;
  const double gemm_peak = r.fp8 ? r.cluster.peak_fp8_flops : r.cluster.peak_flops;
  std::printf(
      "compute per micro-batch: GEMMs %.4f s (%s, %.0f%% of peak), attention cores %.4f s, "
      "elementwise %.4f s\n",
      mb.gemm_seconds, r.fp8 ? "fp8" : "bf16",
      mb.gemm_seconds > 0 ? 100 * mb.gemm_flops / (mb.gemm_seconds * gemm_peak) : 0.0,
      mb.attention_seconds, mb.elementwise_seconds);
  std::printf(
      "roofline: compute %.3f s, bubble %.3f s, optimizer %.3f s, NVLink %.3f s, InfiniBand "
      "%.3f s, exposed communication %.3f s\n",
      p.compute_seconds, p.bubble_seconds, p.optimizer_seconds, p.nvlink_seconds, p.ib_seconds,
      p.exposed_comm_seconds);
  std::printf("step %.3f s, %s tokens/s, MFU %.1f%%\n", p.step_seconds,
              count(p.tokens_per_second()).c_str(), 100 * p.mfu);
}

}  // namespace

void add_plan(CLI::App& app) {
  struct Args {
    std::string model, cluster = "H200", layout, dispatch = "alltoall", optimizer_in = "gpu",
                       routing, gemm = "bf16";
    int64_t routing_step = -1;
    planner::PlanRequest r;
    bool json = false, search = false;
    int64_t gpus = 0;
    size_t top = 5;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "plan", "Memory, communication, bubble and step time of a model on a GPU cluster layout");
  cmd->add_option("--model", a->model, "Model configuration (HF-style JSON)")->required();
  cmd->add_option("--cluster", a->cluster,
                  "H100, H800, H200, B200, H20, A100 (8-GPU nodes), or cpu")
      ->capture_default_str();
  cmd->add_option("--layout", a->layout, "dp=..,tp=..,pp=..,vp=..,ep=..,cp=..[,sp=1]");
  add_number(cmd, "--zero", a->r.layout.zero, "ZeRO stage: 0, 1 or 2");
  cmd->add_option("--activation", a->r.activation, activation::policy_names())
      ->capture_default_str();
  cmd->add_option("--optimizer", a->r.optimizer, "muon or adamw")->capture_default_str();
  add_number(cmd, "--seq", a->r.seq, "Tokens per sequence (--seq x --micro-batch at most 2^24)");
  add_number(cmd, "--global-batch", a->r.global_batch_tokens,
             "Tokens per step, at most 2^40 (0: one micro-batch per reader)");
  add_number(cmd, "--micro-batch", a->r.micro_rows, "Sequences per reader and micro-batch");
  cmd->add_option("--moe-dispatch", a->dispatch, "alltoall or moonep")->capture_default_str();
  add_number(cmd, "--moonep-slots", a->r.layout.moonep_slots, "MoonEP replica slots per rank");
  add_number(cmd, "--gemm-ceiling", a->r.gemm_ceiling,
             "Share of peak a large GEMM reaches, in (0, 1] (default: the calibrated one)");
  cmd->add_option("--gemm", a->gemm, "The weight products' precision: bf16 or fp8")
      ->capture_default_str();
  cmd->add_flag("--ep-overlap", a->r.ep_overlap,
                "The all-to-alls of expert parallelism overlap other micro-batches' compute "
                "(always under dualpipe)");
  cmd->add_option("--schedule", a->r.schedule,
                  "Pipeline schedule: 1f1b (interleaved when vp > 1)"
                  " or dualpipe")
      ->capture_default_str();
  cmd->add_option("--optimizer-in", a->optimizer_in,
                  "Where master weights and optimizer states live: gpu or host")
      ->capture_default_str();
  cmd->add_option("--routing", a->routing,
                  "A run's expert_load.jsonl (or its run directory): plan the expert-parallel "
                  "bytes with that run's routing");
  add_number(cmd, "--routing-step", a->routing_step, "--routing: the step (-1: the last)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_flag("--search", a->search, "Rank the layouts that fit by predicted step time");
  add_number(cmd, "--gpus", a->gpus, "--search: GPUs (0: the --layout's product)",
             Bounds<int64_t>{0, planner::kMaxGpus});
  add_number(cmd, "--top", a->top, "--search: layouts shown", Bounds<size_t>{1, 1000});
  cmd->callback([a] {
    planner::PlanRequest r = a->r;
    const int zero = r.layout.zero;
    const int64_t slots = r.layout.moonep_slots;
    K3_CHECK(a->search || !a->layout.empty(), "plan: give --layout, or --search with --gpus");
    if (!a->layout.empty()) r.layout = planner::parse_layout(a->layout);
    r.layout.zero = zero;
    r.layout.moonep_slots = slots;
    K3_CHECK(a->dispatch == "alltoall" || a->dispatch == "moonep", "--moe-dispatch '", a->dispatch,
             "': one of alltoall, moonep");
    r.layout.moonep = a->dispatch == "moonep";
    K3_CHECK(activation::parse_policy(r.activation).has_value(), "--activation '", r.activation,
             "': one of ", activation::policy_names());
    K3_CHECK(a->optimizer_in == "gpu" || a->optimizer_in == "host", "--optimizer-in '",
             a->optimizer_in, "': one of gpu, host");
    r.optimizer_on_host = a->optimizer_in == "host";
    K3_CHECK(a->gemm == "bf16" || a->gemm == "fp8", "--gemm '", a->gemm, "': one of bf16, fp8");
    r.fp8 = a->gemm == "fp8";
    r.cluster = planner::cluster_preset(a->cluster);
    r.model = model::load_model_config(a->model);
    K3_CHECK(!a->search || a->routing.empty(), "--routing plans one layout, not a --search");
    if (!a->routing.empty()) {
      const std::string file = std::filesystem::is_directory(a->routing)
                                   ? train::expert_load_path(a->routing)
                                   : a->routing;
      r.routing = planner::read_routing(file, a->routing_step);
    }
    if (!a->search) {
      const Plan p = planner::make_plan(r);
      if (a->json)
        std::printf("%s\n", plan_json(p).dump(2).c_str());
      else
        print_plan(p);
      return;
    }
    const int64_t gpus = a->gpus > 0 ? a->gpus : r.layout.gpus();
    const std::vector<Plan> best = planner::search_layouts(r, gpus, a->top);
    if (a->json) {
      nlohmann::json all = nlohmann::json::array();
      for (const Plan& p : best) all.push_back(plan_json(p));
      std::printf("%s\n", nlohmann::json{{"gpus", gpus}, {"layouts", all}}.dump(2).c_str());
      return;
    }
    std::printf("%zu fastest layouts of %lld %s that fit (ZeRO-%d, %s, activations %s):\n",
                best.size(), static_cast<long long>(gpus), r.cluster.name.c_str(), zero,
                r.optimizer.c_str(), r.activation.c_str());
    std::printf("  %-36s %10s %8s %8s %9s %6s\n", "layout", "GPU mem", "bubble", "step s",
                "comm/step", "MFU");
    for (const Plan& p : best)
      std::printf("  %-36s %10s %8.4f %8.3f %9s %5.1f%%\n", p.request.layout.str().c_str(),
                  format_bytes(p.hbm_bytes()).c_str(), p.bubble, p.step_seconds,
                  format_bytes(p.comm_bytes()).c_str(), 100 * p.mfu);
  });
}

}  // namespace k3::apps
