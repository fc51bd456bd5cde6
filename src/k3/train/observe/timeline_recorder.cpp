#include "k3/train/observe/timeline_recorder.h"

#include <nlohmann/json.hpp>

#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/svg_plot.h"
#include "k3/parallel/pipeline/chrome_trace.h"
#include "k3/parallel/pipeline/executor.h"
#include "k3/parallel/pipeline/simulate.h"
#include "k3/parallel/pipeline/timeline_chart.h"

namespace k3::train {

TimelineRecorder::TimelineRecorder(const dist::ProcessGrid& grid,
                                   const parallel::ParallelStep& step, std::string run_dir,
                                   int64_t last_step, std::function<void(const std::string&)> say)
    : grid_(grid),
      step_(step),
      run_dir_(std::move(run_dir)),
      last_step_(last_step),
      say_(std::move(say)) {}

void TimelineRecorder::record(int64_t step, const StepResult&, nlohmann::json&) {
  if (grid_.pp().size() == 1 || drawn_) return;
  if (++steps_seen_ != 2 && step != last_step_) return;
  drawn_ = true;
  namespace pipeline = parallel::pipeline;
  const pipeline::Timeline measured = pipeline::gather_timeline(grid_.pp(), step_.measured());
  if (grid_.world().rank() != 0) return;
  const pipeline::Schedule& s = step_.schedule();
  const pipeline::Timeline planned = pipeline::simulate(s);
  const std::string path = run_dir_ + "/pipeline_timeline.svg";
  write_svg(path, render_gantt(pipeline::timeline_chart(s, planned, &measured)));
  write_file_atomic(
      run_dir_ + "/pipeline_trace.json",
      nlohmann::json{{"step", step}, {"traceEvents", pipeline::timeline_trace_events(s, measured)}}
          .dump());
  say_(strprintf("pipeline timeline of step %lld: %s (measured bubble %.3f, planned %.3f)",
                 static_cast<long long>(step), path.c_str(), measured.bubble_ratio(),
                 planned.bubble_ratio()));
}

}  // namespace k3::train
