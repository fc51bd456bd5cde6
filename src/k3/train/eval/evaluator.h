// The run's periodic evaluation: the validation loss every eval.every steps and at the end of the
// run (or of a curriculum phase), on the lead's model replica (its tp, cp, ep and pp ranks, which
// must all take part); the other data-parallel replicas go on to the next step and wait there.
#pragma once

#include <cmath>
#include <cstdint>

#include "k3/data/dataset.h"
#include "k3/dist/grid.h"
#include "k3/train/eval/evaluate.h"
#include "k3/train/session.h"

namespace k3::train {

// The ranks that hold the lead's model replica (dp rank 0): evaluation and sampling run on them
// alone, since a tensor-, context-, expert- or pipeline-parallel forward needs every rank of its
// groups.
bool in_lead_replica(const dist::ProcessGrid& grid);

class Evaluator {
 public:
  // SESSION and DATASET must outlive the evaluator.
  Evaluator(Session& session, const data::TokenDataset& dataset, const dist::ProcessGrid& grid);

  // Whether this rank evaluates after step STEP (steps completed).
  bool due(int64_t step, int64_t end_step) const;
  EvalResult run();
  double last_loss() const { return last_loss_; }  // NaN before the first

 private:
  Session& session_;
  const data::TokenDataset& dataset_;
  bool member_;  // of the lead's replica
  double last_loss_ = NAN;
};

}  // namespace k3::train
