#include "k3/train/eval/evaluator.h"

namespace k3::train {

bool in_lead_replica(const dist::ProcessGrid& grid) { return grid.coord().dp == 0; }

Evaluator::Evaluator(Session& session, const data::TokenDataset& dataset,
                     const dist::ProcessGrid& grid)
    : session_(session), dataset_(dataset), member_(in_lead_replica(grid)) {}

bool Evaluator::due(int64_t step, int64_t end_step) const {
  const int64_t every = session_.config.eval.every;
  return member_ && every > 0 && (step % every == 0 || step == end_step);
}

EvalResult Evaluator::run() {
  const EvalResult e = evaluate_run(session_, dataset_, session_.config.eval.batches);
  last_loss_ = e.loss;
  return e;
}

}  // namespace k3::train
