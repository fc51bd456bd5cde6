// Every rank's memory in the lead's record, in world rank order: its peak resident memory so far
// ("peak_memory_mib.ranks"), its activations' measured peak beside their pre-flight estimate, and
// its bytes communicated in the step. One small all-gather over the world, counted in the next
// step's figures. One process records only its own peak ("peak_memory_mib").
#pragma once

#include "k3/dist/grid.h"
#include "k3/train/loop/activations.h"
#include "k3/train/observe/comm_recorder.h"
#include "k3/train/observe/recorder.h"

namespace k3::train {

// This process's peak resident memory so far, in MiB.
double peak_rss_mib();

class MemoryRecorder : public Recorder {
 public:
  // ESTIMATED_ACTIVATION_BYTES: the pre-flight estimate for this rank.
  MemoryRecorder(const dist::ProcessGrid& grid, const ActivationRun& activations,
                 CommRecorder& comm, double estimated_activation_bytes);
  void record(int64_t step, const StepResult& result, nlohmann::json& rec) override;

 private:
  const dist::ProcessGrid& grid_;
  const ActivationRun& activations_;
  CommRecorder& comm_;
  double estimated_activation_bytes_;
};

}  // namespace k3::train
