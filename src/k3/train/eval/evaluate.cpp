#include "k3/train/eval/evaluate.h"

#include <algorithm>
#include <cmath>

#include "k3/data/validation_batches.h"
#include "k3/model/context/zigzag.h"
#include "k3/train/loop/image_text_data.h"

namespace k3::train {
namespace {

EvalResult result_of(double sum, int64_t count) {
  EvalResult r;
  r.tokens = count;
  if (count > 0) {
    r.loss = sum / static_cast<double>(count);
    r.perplexity = std::exp(r.loss);
  }
  return r;
}

}  // namespace

EvalResult evaluate(Session& s, const data::TokenView& validation, int64_t batches) {
  data::ValidationBatches val(validation, s.config.train.batch_size, s.config.data.seq_len);
  const int64_t n = batches > 0 ? std::min(batches, val.num_batches()) : val.num_batches();
  double sum = 0;
  int64_t count = 0;
  data::Batch b;
  // Under context parallelism each cp rank scores its chunks of every sequence; the sums add up.
  const dist::Comm& cp = s.model->grid().cp();
  std::vector<int32_t> mine;
  for (int64_t i = 0; i < n; ++i) {
    val.batch(i, b);
    const std::vector<int64_t> docs = s.config.data.documents
                                          ? data::document_starts(b, s.tokenizer->eos_id())
                                          : std::vector<int64_t>{};
    const model::TokenBatch whole{b.inputs.data(), b.targets.data(), b.rows, b.seq_len, docs};
    kernels::LossSum l =
        s.model->forward_loss(s.arena, model::context_share(whole, cp.size(), cp.rank(), mine));
    sum += l.sum;
    count += l.count;
  }
  cp.all_reduce(&sum, 1);
  cp.all_reduce(&count, 1);
  return result_of(sum, count);
}

EvalResult evaluate_run(Session& s, const data::TokenDataset& dataset, int64_t batches) {
  if (!image_text_source(s.config)) return evaluate(s, dataset.validation_tokens(), batches);
  const int64_t n =
      batches > 0 ? std::min(batches, kImageTextValidationBatches) : kImageTextValidationBatches;
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const ImageTextBatch b =
        image_text_batch(s.config, s.model->config(), image_text_validation_sample(s.config, i),
                         s.config.train.batch_size);
    const kernels::LossSum l = s.model->forward_loss(s.arena, b.view());
    sum += l.sum;
    count += l.count;
  }
  return result_of(sum, count);
}

std::vector<int32_t> prompt_ids(const Session& s, const std::string& prompt) {
  return prompt.empty() ? std::vector<int32_t>{s.tokenizer->eos_id()} : s.tokenizer->encode(prompt);
}

Sample sample_text(Session& s, const std::string& prompt, int64_t max_tokens,
                   const model::SamplingParams& p, bool truncate_prompt) {
  std::vector<int32_t> ids = prompt_ids(s, prompt);
  Sample out;
  out.prompt_tokens = static_cast<int64_t>(ids.size());
  if (truncate_prompt) {
    const int64_t room = model::prompt_room(max_tokens, s.model->config().max_position_embeddings);
    out.dropped_tokens = std::max<int64_t>(0, out.prompt_tokens - room);
    ids.erase(ids.begin(), ids.begin() + out.dropped_tokens);
  }
  std::vector<int32_t> continuation =
      model::generate(*s.model, s.arena, ids, max_tokens, p, s.tokenizer->eos_id(), &out.times);
  if (!continuation.empty() && continuation.back() == s.tokenizer->eos_id())
    continuation.pop_back();
  out.text = prompt + s.tokenizer->decode(continuation);
  return out;
}

}  // namespace k3::train
