// Communication per step: bytes, calls and seconds of each process group since the last record
// ("comm.GROUP.bytes", ...), the data-parallel reduction's wait, and this rank's own total
// ("comm.bytes", every group but the world's).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "k3/dist/grid.h"
#include "k3/parallel/zero/grad_sync.h"
#include "k3/train/observe/recorder.h"

namespace k3::train {

class CommRecorder : public Recorder {
 public:
  CommRecorder(const dist::ProcessGrid& grid, const parallel::GradSync& sync);
  void record(int64_t step, const StepResult& result, nlohmann::json& rec) override;
  // This rank's bytes in step STEP (every group but the world's), read from the counters once
  // per step, whichever asks first.
  int64_t bytes(int64_t step);

 private:
  struct Counted {
    std::string group;
    dist::Counters now, before;  // at step counted_step_, at the one before
  };
  void count(int64_t step);

  const dist::ProcessGrid& grid_;
  const parallel::GradSync& sync_;
  std::vector<Counted> groups_;
  int64_t counted_step_ = -1;
};

}  // namespace k3::train
