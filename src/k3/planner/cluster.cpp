#include "k3/planner/cluster.h"

#include <algorithm>
#include <cctype>

#include "k3/base/error.h"

namespace k3::planner {
namespace {

constexpr double kTera = 1e12, kGB = 1e9, kGiB = 1024.0 * 1024.0 * 1024.0;

// 400 Gb/s per GPU (one ConnectX-7 NDR port each) is 50 GB/s a direction.
constexpr double kNdrPerGpu = 400e9 / 8;

// 200 Gb/s per GPU (one ConnectX-6 HDR port each, DGX A100) is 25 GB/s a direction.
constexpr double kHdrPerGpu = 200e9 / 8;

std::vector<Cluster> make_presets() {
  std::vector<Cluster> p;
  p.push_back({"H100", "HGX/DGX H100 SXM5, 8 GPUs, NVLink 4, 8x NDR 400G", 8, 989 * kTera,
               1979 * kTera, 80 * kGB, 3.35e12, 450 * kGB, kNdrPerGpu, 2048 * kGB, Precision{},
               false, 132});
  // The H100's die and memory with NVLink cut to 400 GB/s both ways together (export version).
  p.push_back({"H800", "HGX H800 SXM5, 8 GPUs, NVLink 400 GB/s, 8x NDR 400G", 8, 989 * kTera,
               1979 * kTera, 80 * kGB, 3.35e12, 200 * kGB, kNdrPerGpu, 2048 * kGB, Precision{},
               false, 132});
  p.push_back({"H200", "HGX H200 SXM, 8 GPUs, NVLink 4, 8x NDR 400G", 8, 989 * kTera, 1979 * kTera,
               141 * kGB, 4.8e12, 450 * kGB, kNdrPerGpu, 2048 * kGB, Precision{}, false, 132});
  p.push_back({"B200", "HGX B200, 8 GPUs, NVLink 5, 8x NDR 400G", 8, 2250 * kTera, 4500 * kTera,
               180 * kGB, 7.7e12, 900 * kGB, kNdrPerGpu, 4096 * kGB, Precision{}, false, 148});
  p.push_back({"H20", "HGX H20, 8 GPUs, NVLink 4, 8x NDR 400G", 8, 148 * kTera, 296 * kTera,
               96 * kGB, 4e12, 450 * kGB, kNdrPerGpu, 2048 * kGB, Precision{}, false, 78});
  // No FP8 tensor cores on Ampere.
  p.push_back({"A100", "DGX A100 80GB SXM4, 8 GPUs, NVLink 3, 8x HDR 200G", 8, 312 * kTera, 0,
               80 * kGB, 2.039e12, 300 * kGB, kHdrPerGpu, 2048 * kGB, Precision{}, false, 108});
  // k3lab's MPI ranks share one machine: every group is "inside the node", and everything is
  // fp32 (the payloads its counters report). The speed figures are nominal: a CPU plan is for
  // its memory and bytes, not its time.
  p.push_back({"cpu", "k3lab's MPI ranks on one machine, fp32", 1 << 20, 50e9, 0, 64 * kGiB, 20e9,
               10e9, 10e9, 64 * kGiB, Precision{4, 0, 4, 4, 4}, true, 1});
  return p;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

const std::vector<Cluster>& cluster_presets() {
  static const std::vector<Cluster> presets = make_presets();
  return presets;
}

const Cluster& cluster_preset(const std::string& name) {
  std::string names;
  for (const Cluster& c : cluster_presets()) {
    if (lower(c.name) == lower(name)) return c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  throw Error("--cluster: unknown preset '" + name + "' (one of " + names + ")");
}

}  // namespace k3::planner
