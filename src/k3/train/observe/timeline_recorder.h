// Under pipeline parallelism: one step's measured timeline beside the planned one, drawn to
// RUN_DIR/pipeline_timeline.svg, and the same step for Perfetto in RUN_DIR/pipeline_trace.json
// (`k3lab report` puts it in RUN_DIR/trace.json). Drawn once, after the second step this process
// runs (the first warms up) or after the run's last step, whichever comes first: the measured
// nodes are gathered over pp, a collective every pp rank runs at that same step.
#pragma once

#include <functional>
#include <string>

#include "k3/dist/grid.h"
#include "k3/parallel/parallel_step.h"
#include "k3/train/observe/recorder.h"

namespace k3::train {

class TimelineRecorder : public Recorder {
 public:
  // LAST_STEP: the run's train.steps. SAY shows the drawing's path on the lead.
  TimelineRecorder(const dist::ProcessGrid& grid, const parallel::ParallelStep& step,
                   std::string run_dir, int64_t last_step,
                   std::function<void(const std::string&)> say);
  void record(int64_t step, const StepResult& result, nlohmann::json& rec) override;

 private:
  const dist::ProcessGrid& grid_;
  const parallel::ParallelStep& step_;
  std::string run_dir_;
  int64_t last_step_;
  std::function<void(const std::string&)> say_;
  int64_t steps_seen_ = 0;  // by this process
  bool drawn_ = false;
};

}  // namespace k3::train
