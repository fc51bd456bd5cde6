#include "k3/train/checkpoint/checkpointer.h"

#include "k3/train/checkpoint/sharded.h"

namespace k3::train {

Checkpointer::Checkpointer(const CheckpointSection& config, std::string run_dir, bool writer)
    : config_(config), run_dir_(std::move(run_dir)), writer_(writer) {}

bool Checkpointer::due(int64_t step, int64_t end_step) const {
  return (config_.every > 0 && step % config_.every == 0) || step == end_step;
}

std::string Checkpointer::save(const Session& session, parallel::ShardedOptimizer& optimizer,
                               const TrainingState& state, const nlohmann::json& layout) {
  nlohmann::json manifest = {{"step", state.step},
                             {"optimizer", optimizer.summary()},
                             {"optimizer_steps", state.optimizer_steps},
                             {"skipped_steps", state.skipped_steps},
                             {"data_cursor", state.cursor.to_string()},
                             {"seed", session.config.model.seed},
                             {"rng", "philox4x32-10; stateless, keyed by (seed, stream, index)"},
                             {"layout", layout},
                             {"data", state.data}};
  if (state.phase >= 0) manifest["phase"] = state.phase;
  // Every rank runs the save's fills, each gathering one tensor in global coordinates from the
  // ranks' shards; the writer alone writes.
  last_ = save_checkpoint(
      run_dir_, state.step,
      make_checkpoint(session, optimizer_sources(optimizer, *session.model), manifest),
      static_cast<int>(config_.keep_last), writer_);
  last_step_ = state.step;
  return last_;
}

void Checkpointer::resumed_from(int64_t step, std::string dir) {
  last_step_ = step;
  last_ = std::move(dir);
}

}  // namespace k3::train
