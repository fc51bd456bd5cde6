// The machines a plan is made for: a node of GPUs (or k3lab's own CPU processes) described by the
// handful of figures the roofline needs. Each GPU figure's public source is in docs/planner.md.
#pragma once

#include <string>
#include <vector>

namespace k3::planner {

// Bytes per element of what a run keeps and moves: a GPU run computes in bf16 and keeps fp32
// master weights, gradients and optimizer states; k3lab's CPU runs keep everything in fp32.
struct Precision {
  double weight = 2;      // the working copy of the weights (and MoonEP's replicas)
  double master = 4;      // the optimizer's copy of the weights (0: the working copy is it)
  double gradient = 4;    // gradients and their reduction
  double activation = 2;  // saved activations and what the layers exchange
  double gather = 2;      // the parameters ZeRO all-gathers after the update
};

struct Cluster {
  std::string name;
  std::string description;
  int gpus_per_node = 8;
  double peak_flops = 0;        // dense BF16 per GPU, FLOP/s
  double peak_fp8_flops = 0;    // dense FP8 per GPU, FLOP/s; 0: no FP8 tensor cores
  double hbm_bytes = 0;         // device memory per GPU
  double hbm_bandwidth = 0;     // bytes/s per GPU
  double nvlink_bandwidth = 0;  // bytes/s per GPU and direction, inside a node
  double ib_bandwidth = 0;      // bytes/s per GPU and direction, across nodes
  double host_bytes = 0;        // host memory per node
  Precision precision;
  bool is_cpu = false;  // k3lab's own CPU processes: one node, fp32, counters' terms
  int sms = 1;          // streaming multiprocessors per GPU, among which a GEMM's tiles are dealt
};

// H100, H800, H200, B200, H20, A100 (HGX/DGX nodes of 8), and "cpu" (k3lab's MPI ranks on one
// machine).
const std::vector<Cluster>& cluster_presets();
// The preset of that name (case-insensitive); throws one line listing the presets.
const Cluster& cluster_preset(const std::string& name);

}  // namespace k3::planner
