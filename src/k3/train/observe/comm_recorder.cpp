#include "k3/train/observe/comm_recorder.h"

namespace k3::train {

CommRecorder::CommRecorder(const dist::ProcessGrid& grid, const parallel::GradSync& sync)
    : grid_(grid), sync_(sync) {
  for (const dist::Comm* g : grid_.groups()) groups_.push_back({g->name(), {}, {}});
}

void CommRecorder::count(int64_t step) {
  if (step == counted_step_) return;
  counted_step_ = step;
  const auto groups = grid_.groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    groups_[i].before = groups_[i].now;
    groups_[i].now = groups[i]->counters();
  }
}

int64_t CommRecorder::bytes(int64_t step) {
  count(step);
  const auto groups = grid_.groups();
  int64_t mine = 0;
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i] != &grid_.world()) mine += groups_[i].now.bytes() - groups_[i].before.bytes();
  return mine;
}

void CommRecorder::record(int64_t step, const StepResult&, nlohmann::json& rec) {
  count(step);
  const auto groups = grid_.groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i]->size() == 1) continue;
    const Counted& c = groups_[i];
    rec["comm." + c.group + ".bytes"] = c.now.bytes() - c.before.bytes();
    rec["comm." + c.group + ".calls"] = c.now.calls() - c.before.calls();
    rec["comm." + c.group + ".seconds"] = c.now.seconds() - c.before.seconds();
  }
  if (grid_.dp().size() > 1) rec["comm.dp.wait_seconds"] = sync_.wait_seconds();
  rec["comm.bytes"] = bytes(step);
}

}  // namespace k3::train
