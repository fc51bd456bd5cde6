// Text sampled while a run trains ([sample]): every sample.every steps but the last, and at the
// end. Decoding needs every layer on one rank, so under pipeline parallelism only the lead samples,
// from the checkpoint of that step (which the checkpointer must have saved), in a session of its
// own; otherwise the lead's replica samples from the live model.
#pragma once

#include <cstdint>
#include <string>

#include "k3/dist/grid.h"
#include "k3/train/checkpoint/checkpointer.h"
#include "k3/train/session.h"

namespace k3::train {

class Sampler {
 public:
  // Refuses a [sample] that does not fit the model's context (its field named), before training.
  Sampler(Session& session, const dist::ProcessGrid& grid);

  // Whether this rank samples during the run after step STEP (steps completed); at the end of
  // the run, member() alone decides.
  bool due(int64_t step) const;
  bool member() const { return member_; }
  // The prompt and its continuation after step STEP (seeded by it).
  std::string sample(int64_t step, const Checkpointer& checkpoints) const;

 private:
  Session& session_;
  const dist::ProcessGrid& grid_;
  bool member_;  // the lead's replica, or under pipeline parallelism the lead alone
};

}  // namespace k3::train
