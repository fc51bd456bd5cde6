#include "k3/train/loop/trainer.h"

#include <array>
#include <cstring>
#include <filesystem>
#include <functional>

#include "k3/base/checksum.h"
#include "k3/base/dir_lock.h"
#include "k3/base/error.h"
#include "k3/base/log.h"
#include "k3/base/threads.h"
#include "k3/dist/grid.h"
#include "k3/dist/runtime.h"
#include "k3/train/checkpoint/checkpoint.h"
#include "k3/train/checkpoint/share.h"
#include "k3/train/config/curriculum.h"
#include "k3/train/config/parallel.h"
#include "k3/train/loop/train_loop.h"
#include "k3/train/preflight/preflight.h"

namespace k3::train {
namespace {

// Every rank must train the same run: a job launched with different arguments or files on
// different ranks would wait forever in mismatched collectives. Refused on the rank that differs.
void check_same_run(const dist::Comm& world, const RunConfig& config,
                    const model::ModelConfig& model) {
  if (world.size() == 1) return;
  Sha256 hash;
  hash.update(to_toml(config));
  hash.update(model::model_config_to_json(model).dump());
  const std::array<uint8_t, 32> mine = hash.digest();
  std::array<int32_t, 8> lead{};
  std::memcpy(lead.data(), mine.data(), mine.size());
  world.broadcast(lead.data(), static_cast<int64_t>(lead.size()), 0);
  K3_CHECK(std::memcmp(lead.data(), mine.data(), mine.size()) == 0, "rank ", world.rank(),
           " resolved another run configuration than rank 0 (different arguments, files or "
           "working directory on this rank?)");
}

// The resume point of a rank other than the lead, whose own is LEAD_POINT's (world rank 0's):
// planned by PLAN from the run directory where this rank sees the lead's checkpoint, from a copy
// the lead sends where it does not (another host, no shared filesystem). Collective over WORLD.
ResumePoint plan_beside_lead(const dist::Comm& world, const std::string& run_dir,
                             const ResumePoint& lead_point,
                             const std::function<ResumePoint(const std::string&)>& plan) {
  const bool lead = world.rank() == 0;
  const CheckpointView view = share_checkpoint(world, run_dir, lead ? lead_point.found.dir : "");
  if (lead) return {};
  ResumePoint p = plan(view.run_dir());
  p.config.run.dir = run_dir;          // where the lead writes, whatever this rank read
  p.found.dir = view.lead_step_dir();  // what the lead resumed from, as every message names it
  return p;
}

// The pre-flight checks of every phase from step FROM_STEP on, the same run on every rank: a phase
// that cannot run is refused before any training. The data of the first is kept for it.
PreflightResult preflight_phases(const dist::Comm& world, const RunConfig& run_config,
                                 const model::ModelConfig& model, int64_t from_step) {
  const int first = run_config.curriculum.empty() ? -1 : phase_at(run_config, from_step);
  PreflightResult kept;
  for (int p = static_cast<int>(run_config.curriculum.size()) - 1; p >= first; --p) {
    const RunConfig config = phase_config(run_config, p);
    within_phase(p, [&] {
      check_same_run(world, config, model);
      PreflightResult checked = preflight(config, model);
      if (p == first) kept = std::move(checked);
    });
  }
  return kept;
}

// Trains from FROM (null: a new run) to train.steps. Under a curriculum, one loop a phase: the
// phase's last step is checkpointed and the next phase resumes from that checkpoint in a loop of
// its own, so that its data, activation policy and layout may differ. CHECKED: the pre-flight
// result of the first phase.
TrainSummary train_phases(const RunConfig& run_config, const model::ModelConfig& model,
                          const TrainOptions& options, const StopSignals& stop,
                          PreflightResult checked, ResumePoint* from) {
  const dist::Comm world = dist::Comm::world();
  ResumePoint next;
  for (;;) {
    const int64_t step = from ? from->state.step : 0;
    const int phase = run_config.curriculum.empty() ? -1 : phase_at(run_config, step);
    const RunConfig config = phase_config(run_config, phase);
    if (checked.threads > 0) set_num_threads(checked.threads);
    const dist::ProcessGrid grid(parallel_dims(config.parallel), world);
    TrainLoop loop(run_config, phase, config, model, options, stop, std::move(checked.dataset),
                   from, grid);
    TrainSummary out = loop.run();
    if (out.stop_signal || out.steps >= run_config.train.steps) return out;
    world.barrier();  // the phase's last checkpoint is saved
    const auto plan = [](const std::string& dir) { return plan_resume(dir, "", {}, {}); };
    const bool lead = world.rank() == 0;
    if (lead) next = plan(run_config.run.dir);
    ResumePoint beside = plan_beside_lead(world, run_config.run.dir, next, plan);
    if (!lead) next = std::move(beside);
    from = &next;
    checked = preflight(phase_config(run_config, phase_at(run_config, out.steps)), model);
  }
}

}  // namespace

TrainSummary train(const RunConfig& config, const TrainOptions& options) {
  StopSignals stop;
  const std::string& dir = config.run.dir;
  const dist::Comm world = dist::Comm::world();
  const bool lead = world.rank() == 0;  // the lead alone owns and writes the run directory
  // Locked as soon as it exists, so a second trainer is refused before any work.
  std::unique_ptr<DirLock> lock;
  if (lead && std::filesystem::is_directory(dir))
    lock = std::make_unique<DirLock>(dir, "k3lab train");
  K3_CHECK_CTX(!lead || list_checkpoints(dir).empty(), (ErrorContext{dir, "", -1}),
               "the run directory already holds checkpoints: continue it with k3lab train "
               "--resume ",
               dir, ", or choose another run.dir");
  const model::ModelConfig model = model::load_model_config(config.model.config);
  PreflightResult checked = preflight_phases(world, config, model, 0);
  if (lead && !lock) {
    std::filesystem::create_directories(dir);
    lock = std::make_unique<DirLock>(dir, "k3lab train");
  }
  return train_phases(config, model, options, stop, std::move(checked), nullptr);
}

TrainSummary resume(const ResumeRequest& request, const TrainOptions& options) {
  StopSignals stop;
  const std::string& dir = request.run_dir;
  const dist::Comm world = dist::Comm::world();
  const bool lead = world.rank() == 0;
  // The lead's disk holds the run; the other ranks need not see it.
  K3_CHECK_CTX(!lead || std::filesystem::is_directory(dir + "/checkpoints"),
               (ErrorContext{dir, "", -1}), "not a run directory (it has no checkpoints/ folder)",
               world.size() > 1 ? " on rank 0's host, " + dist::host_name() : "");
  auto plan = [&](const std::string& from_dir) {
    return plan_resume(from_dir, request.config_path, request.overrides, request.allowed_changes);
  };
  // The lead tidies the checkpoints (unfinished saves removed, unusable ones set aside) before
  // any other rank looks for the newest usable one.
  std::unique_ptr<DirLock> lock;
  ResumePoint from;
  if (lead) {
    lock = std::make_unique<DirLock>(dir, "k3lab train");
    if (int n = remove_unfinished_saves(dir); n > 0)
      log_warn("removed ", n, " unfinished checkpoint save(s) in ", dir, "/checkpoints");
    from = plan(dir);
    for (const SkippedCheckpoint& sk : from.found.skipped) {
      from.set_aside.push_back(set_aside_checkpoint(sk.dir));
      log_warn("skipped checkpoint ", sk.describe(), "; set aside as ", from.set_aside.back());
    }
  }
  ResumePoint beside = plan_beside_lead(world, dir, from, plan);
  if (!lead) from = std::move(beside);
  TrainSummary done;
  if (from.state.step >= from.config.train.steps) {  // nothing to do: say so, change nothing
    done.run_dir = dir;
    done.steps = from.state.step;
    done.finished_before = true;
    done.last_checkpoint = from.found.dir;
    return done;
  }
  PreflightResult checked = preflight_phases(world, from.config, from.model, from.state.step);
  return train_phases(from.config, from.model, options, stop, std::move(checked), &from);
}

}  // namespace k3::train
