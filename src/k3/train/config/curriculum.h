// The context curriculum's mechanics ([[curriculum]] phases of a run configuration, run_config.h):
// where each phase ends, which phase a step belongs to, and the configuration a phase trains with.
//
// Phase i ends after step round((share_0 + ... + share_i) x train.steps), the last at train.steps.
// A phase keeps the tokens of a micro-batch: its batch is train.batch_size x data.seq_len /
// seq_len sequences. Its data order is the run's with seed data.seed + i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/base/error.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

// Throws an Error (field "curriculum[i]...") unless the shares sum to 1, every phase gets at least
// one step, its sequence length divides the micro-batch's tokens, and its settings apply.
void check_curriculum(const RunConfig& config);

// The step after each phase's last; empty without a curriculum.
std::vector<int64_t> phase_ends(const RunConfig& config);
// The phase that step STEP + 1 trains in (the last one from train.steps on); -1 without a
// curriculum.
int phase_at(const RunConfig& config, int64_t step);
// What phase PHASE trains with: CONFIG with the phase's seq_len, batch and settings; CONFIG itself
// for phase -1.
RunConfig phase_config(const RunConfig& config, int phase);

// Runs F() for phase PHASE: an Error it throws names the phase ("curriculum[1]: ..."); for phase -1
// (no curriculum) it passes unchanged.
template <typename F>
decltype(auto) within_phase(int phase, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (phase < 0) throw;
    throw Error("curriculum[" + std::to_string(phase) + "]: " + e.message(), e.context());
  }
}

}  // namespace k3::train
