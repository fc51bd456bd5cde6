#include "k3/train/evaluate.h"

#include <cmath>

#include "k3/data/validation_batches.h"
#include "k3/model/sampling.h"

namespace k3::train {

EvalResult evaluate(Session& s, std::span<const int32_t> validation, int64_t batches) {
  data::ValidationBatches val(validation, s.config.train.batch_size, s.config.data.seq_len);
  const int64_t n = batches > 0 ? std::min(batches, val.num_batches()) : val.num_batches();
  double sum = 0;
  int64_t count = 0;
  data::Batch b;
  for (int64_t i = 0; i < n; ++i) {
    val.batch(i, b);
    kernels::LossSum l = s.model->forward_loss(s.arena, {b.inputs.data(), b.targets.data(), b.rows, b.seq_len});
    sum += l.sum;
    count += l.count;
  }
  EvalResult r;
  r.tokens = count;
  if (count > 0) {
    r.loss = sum / static_cast<double>(count);
    r.perplexity = std::exp(r.loss);
  }
  return r;
}

std::string sample_text(Session& s, const std::string& prompt, int64_t max_tokens, double temperature,
                        int64_t top_k, double top_p, uint64_t seed) {
  std::vector<int32_t> ids = prompt.empty() ? std::vector<int32_t>{s.tokenizer->eos_id()}
                                            : s.tokenizer->encode(prompt);
  SamplingParams p{static_cast<float>(temperature), top_k, static_cast<float>(top_p), seed};
  std::vector<int32_t> out = generate(*s.model, s.arena, ids, max_tokens, p, s.tokenizer->eos_id());
  if (!out.empty() && out.back() == s.tokenizer->eos_id()) out.pop_back();
  return prompt + s.tokenizer->decode(out);
}

}  // namespace k3::train
