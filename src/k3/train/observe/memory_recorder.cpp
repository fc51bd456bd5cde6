#include "k3/train/observe/memory_recorder.h"

#include <sys/resource.h>

#include <vector>

namespace k3::train {

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

MemoryRecorder::MemoryRecorder(const dist::ProcessGrid& grid, const ActivationRun& activations,
                               CommRecorder& comm, double estimated_activation_bytes)
    : grid_(grid),
      activations_(activations),
      comm_(comm),
      estimated_activation_bytes_(estimated_activation_bytes) {}

void MemoryRecorder::record(int64_t step, const StepResult&, nlohmann::json& rec) {
  rec["peak_memory_mib"] = peak_rss_mib();
  rec["memory.estimated_activation_bytes"] = estimated_activation_bytes_;
  const dist::Comm& world = grid_.world();
  if (world.size() == 1) return;
  const auto ranks = static_cast<size_t>(world.size()), me = static_cast<size_t>(world.rank());
  constexpr size_t kValues = 4;
  std::vector<double> all(kValues * ranks);
  all[kValues * me] = peak_rss_mib();
  all[kValues * me + 1] = static_cast<double>(activations_.peak_bytes());
  all[kValues * me + 2] = estimated_activation_bytes_;
  all[kValues * me + 3] = static_cast<double>(comm_.bytes(step));
  world.all_gather(all.data(), std::vector<int64_t>(ranks, kValues));
  const char* names[] = {"peak_memory_mib.ranks", "activation.peak_bytes.ranks",
                         "memory.estimated_activation_bytes.ranks", "comm.bytes.ranks"};
  for (size_t k = 0; k < kValues; ++k) {
    std::vector<double> by_rank(ranks);
    for (size_t r = 0; r < ranks; ++r) by_rank[r] = all[kValues * r + k];
    rec[names[k]] = by_rank;
  }
}

}  // namespace k3::train
