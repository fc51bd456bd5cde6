#include "k3/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/base/profile.h"
#include "k3/base/timer.h"
#include "k3/model/model.h"

namespace k3::model {

void check_sampling_params(const SamplingParams& p) {
  auto field = [](const char* name) { return ErrorContext{"", name, -1}; };
  K3_CHECK_CTX(std::isfinite(p.temperature) && p.temperature >= 0, field("temperature"),
               "expected a finite value >= 0 (0: greedy), got ", p.temperature);
  K3_CHECK_CTX(p.top_k >= 0, field("top_k"), "expected a value >= 0 (0: no top-k filter), got ",
               p.top_k);
  K3_CHECK_CTX(p.top_p > 0 && p.top_p <= 1, field("top_p"), "expected a value in (0, 1], got ",
               p.top_p);
}

int64_t prompt_room(int64_t max_new, int64_t context) {
  K3_CHECK_CTX(max_new >= 1 && max_new < context, (ErrorContext{"", "max_tokens", -1}),
               "expected from 1 to ", context - 1, " new tokens (the model's context of ", context,
               " tokens, max_position_embeddings, less one for the prompt), got ", max_new);
  return context - max_new;
}

void check_prompt_fits(int64_t prompt_len, int64_t max_new, int64_t context) {
  const int64_t room = prompt_room(max_new, context);
  K3_CHECK_CTX(prompt_len <= room, (ErrorContext{"", "prompt", -1}), "a prompt of ", prompt_len,
               " tokens plus max_tokens ", max_new, " exceeds the model's context of ", context,
               " tokens (max_position_embeddings): at most ", room, " prompt tokens fit");
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, float u) {
  K3_CHECK(!logits.empty(), "cannot sample from empty logits");
  check_sampling_params(p);
  K3_CHECK_CTX(u >= 0 && u <= 1, (ErrorContext{"", "u", -1}), "expected a draw in [0, 1], got ", u);
  for (size_t i = 0; i < logits.size(); ++i)
    K3_CHECK(std::isfinite(logits[i]), "expected finite logits, found ", logits[i], " at token ",
             i);
  if (p.temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Candidates by descending logit; top-k keeps the first k.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k =
      p.top_k > 0 ? std::min(order.size(), static_cast<size_t>(p.top_k)) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<int64_t>(k), order.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  order.resize(k);
  std::vector<double> prob(k);
  const double top = logits[order[0]];
  double sum = 0;
  for (size_t i = 0; i < k; ++i)
    sum += prob[i] = std::exp((logits[order[i]] - top) / p.temperature);
  // Top-p keeps the smallest prefix whose probability reaches p.
  size_t keep = k;
  if (p.top_p < 1.0) {
    double acc = 0;
    for (size_t i = 0; i < k; ++i) {
      acc += prob[i] / sum;
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = std::accumulate(prob.begin(), prob.begin() + static_cast<int64_t>(keep), 0.0);
  double target = u * kept, acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (target < acc) return order[i];
  }
  return order[keep - 1];
}

std::vector<int32_t> generate(Model& model, Arena& arena, const std::vector<int32_t>& prompt,
                              int64_t max_new, const SamplingParams& p, int32_t stop_token,
                              GenerationTimes* times) {
  return generate_batch(model, arena, {prompt}, max_new, p, stop_token, times)[0];
}

std::vector<std::vector<int32_t>> generate_batch(Model& model, Arena& arena,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 int64_t max_new, const SamplingParams& p,
                                                 int32_t stop_token, GenerationTimes* times) {
  K3_CHECK(!prompts.empty(), "generation needs at least one prompt");
  check_sampling_params(p);
  for (const std::vector<int32_t>& prompt : prompts) {
    K3_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
    check_prompt_fits(static_cast<int64_t>(prompt.size()), max_new,
                      model.config().max_position_embeddings);
  }
  const int64_t B = static_cast<int64_t>(prompts.size()), V = model.config().vocab_size;
  GenerationTimes t;
  std::vector<ModelCache> caches;
  std::vector<float> logits(static_cast<size_t>(B * V));
  Timer prefill;
  ProfileScope prefill_bucket("prefill");
  std::vector<int32_t> prompt_tokens;
  std::vector<int64_t> lengths;
  for (const std::vector<int32_t>& prompt : prompts) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    caches.push_back(model.make_cache(n + max_new));
    prompt_tokens.insert(prompt_tokens.end(), prompt.begin(), prompt.end());
    lengths.push_back(n);
    t.prefill_tokens += n;
  }
  std::vector<ModelCache*> cache_of(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    cache_of[static_cast<size_t>(b)] = &caches[static_cast<size_t>(b)];
  model.prefill(arena, cache_of, prompt_tokens.data(), lengths, logits.data());
  t.prefill_seconds = prefill.seconds();
  prefill_bucket.stop();

  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<int64_t> active(static_cast<size_t>(B));  // unfinished sequences, by index
  for (int64_t b = 0; b < B; ++b) active[static_cast<size_t>(b)] = b;
  std::vector<ModelCache*> step_caches;
  std::vector<int32_t> step_tokens;
  Timer decode;
  ProfileScope decode_bucket("decode");
  for (int64_t i = 0; !active.empty(); ++i) {
    // Row r of logits belongs to active[r].
    step_caches.clear();
    step_tokens.clear();
    for (size_t r = 0; r < active.size(); ++r) {
      const int64_t b = active[r];
      const std::span<const float> row(logits.data() + static_cast<int64_t>(r) * V,
                                       static_cast<size_t>(V));
      const int32_t next = sample_token(
          row, p,
          philox_uniform(p.seed, stream_of("sample"), static_cast<uint64_t>(b * max_new + i)));
      out[static_cast<size_t>(b)].push_back(next);
      if (next == stop_token || i + 1 == max_new) continue;
      step_caches.push_back(&caches[static_cast<size_t>(b)]);
      step_tokens.push_back(next);
    }
    active.clear();
    for (ModelCache* c : step_caches) active.push_back(c - caches.data());
    if (active.empty()) break;
    model.decode_batch(arena, step_caches, step_tokens.data(), logits.data());
    t.decode_tokens += static_cast<int64_t>(active.size());
  }
  t.decode_seconds = decode.seconds();
  if (times) *times = t;
  return out;
}

}  // namespace k3::model
