#include "k3/train/eval/sampler.h"

#include "k3/base/error.h"
#include "k3/model/sampling.h"
#include "k3/train/eval/evaluate.h"
#include "k3/train/eval/evaluator.h"

namespace k3::train {

Sampler::Sampler(Session& session, const dist::ProcessGrid& grid)
    : session_(session),
      grid_(grid),
      member_(grid.pp().size() == 1 ? in_lead_replica(grid) : grid.world().rank() == 0) {
  const SampleSection& c = session.config.sample;
  try {
    model::check_prompt_fits(static_cast<int64_t>(prompt_ids(session, c.prompt).size()),
                             c.max_tokens, session.model->config().max_position_embeddings);
  } catch (const Error& e) {
    throw Error(e.message(), ErrorContext{"", "sample." + e.context().field, -1});
  }
}

bool Sampler::due(int64_t step) const {
  const SampleSection& c = session_.config.sample;
  return member_ && c.every > 0 && step % c.every == 0 && step != session_.config.train.steps;
}

std::string Sampler::sample(int64_t step, const Checkpointer& checkpoints) const {
  const SampleSection& c = session_.config.sample;
  const model::SamplingParams p{c.temperature, c.top_k, c.top_p, static_cast<uint64_t>(step)};
  if (grid_.pp().size() == 1) return sample_text(session_, c.prompt, c.max_tokens, p).text;
  K3_CHECK(checkpoints.last_step() == step, "no checkpoint of step ", step, " to sample");
  return sample_text(*open_checkpoint_session(checkpoints.last()), c.prompt, c.max_tokens, p).text;
}

}  // namespace k3::train
