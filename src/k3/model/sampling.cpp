#include "k3/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "k3/base/error.h"
#include "k3/base/philox.h"
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
                              int64_t max_new, const SamplingParams& p, int32_t stop_token) {
  K3_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  check_sampling_params(p);
  check_prompt_fits(static_cast<int64_t>(prompt.size()), max_new,
                    model.config().max_position_embeddings);
  ModelCache cache = model.make_cache(static_cast<int64_t>(prompt.size()) + max_new);
  std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
  model.decode(arena, cache, prompt.data(), static_cast<int64_t>(prompt.size()), logits.data());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    int32_t next = sample_token(
        logits, p, philox_uniform(p.seed, stream_of("sample"), static_cast<uint64_t>(i)));
    out.push_back(next);
    if (next == stop_token || i + 1 == max_new) break;
    model.decode(arena, cache, &next, 1, logits.data());
  }
  return out;
}

}  // namespace k3::model
