// Model, its decoding: every layer through the same per-layer steps as the training forward
// (run_layer), each mixer by its decode call on its cache.
#include <algorithm>
#include <span>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/model/model.h"

namespace k3::model {

ModelCache Model::make_cache(int64_t max_len) const {
  ModelCache c;
  c.max_len = max_len;
  for (const Layer& L : layers_) c.layers.push_back(L.mixer->make_cache(max_len));
  return c;
}

void Model::decode(Arena& arena, ModelCache& cache, const int32_t* tokens, int64_t n,
                   float* logits) {
  ModelCache* one[] = {&cache};
  const int64_t lengths[] = {n};
  prefill(arena, one, tokens, lengths, logits);
}

void Model::prefill(Arena& arena, std::span<ModelCache* const> caches, const int32_t* tokens,
                    std::span<const int64_t> lengths, float* logits) {
  K3_CHECK(!caches.empty() && caches.size() == lengths.size(),
           "prefill needs one length for each of its sequences, got ", lengths.size(), " for ",
           caches.size());
  std::vector<int64_t> first, last;  // each sequence's first row, and the row of its logits
  int64_t n = 0;
  for (size_t b = 0; b < caches.size(); ++b) {
    K3_CHECK(lengths[b] > 0, "decode needs at least one token");
    K3_CHECK(caches[b]->length + lengths[b] <= caches[b]->max_len,
             "generation exceeds the cache of ", caches[b]->max_len, " tokens");
    first.push_back(n);
    n += lengths[b];
    last.push_back(n - 1);
  }
  const int64_t d = config_.hidden_size;
  run_decode(
      arena, tokens, n, logits,
      [&](const Step& s, const Layer& L, const float* a_in, float* A) {
        for (size_t b = 0; b < caches.size(); ++b)
          L.mixer->decode(s, a_in + first[b] * d, lengths[b],
                          *caches[b]->layers[static_cast<size_t>(L.index)], A + first[b] * d);
      },
      last);
  for (size_t b = 0; b < caches.size(); ++b) caches[b]->length += lengths[b];
}

void Model::decode_batch(Arena& arena, std::span<ModelCache* const> caches, const int32_t* tokens,
                         float* logits) {
  const int64_t B = static_cast<int64_t>(caches.size());
  K3_CHECK(B > 0, "batched decoding needs at least one sequence");
  for (const ModelCache* c : caches)
    K3_CHECK(c->length + 1 <= c->max_len, "generation exceeds the cache of ", c->max_len,
             " tokens");
  std::vector<DecodeCache*> layer_caches(static_cast<size_t>(B));
  std::vector<int64_t> every_row(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) every_row[static_cast<size_t>(b)] = b;
  run_decode(
      arena, tokens, B, logits,
      [&](const Step& s, const Layer& L, const float* a_in, float* A) {
        for (int64_t b = 0; b < B; ++b)
          layer_caches[static_cast<size_t>(b)] =
              caches[static_cast<size_t>(b)]->layers[static_cast<size_t>(L.index)].get();
        L.mixer->decode_batch(s, a_in, layer_caches, A);
      },
      every_row);
  for (ModelCache* c : caches) c->length += 1;
}

// The per-layer steps of the forward on n rows with `mix` as each layer's mixer; the logits of
// logit_rows, gathered into consecutive rows first unless they are every row.
void Model::run_decode(Arena& arena, const int32_t* tokens, int64_t n, float* logits,
                       const DecodeMixer& mix, std::span<const int64_t> logit_rows) {
  K3_CHECK(split_.pp == 1, "decoding needs every layer on one rank (pp = ", split_.pp, ")");
  ArenaScope scope(arena);
  activation::ActivationManager unused;
  Step s = step({0, arena, unused}, false);
  s.sequence_parallel = false;  // a few tokens at a time: every rank holds them all
  Stream x{embed(s, tokens, n), {}};
  for (const Layer& L : layers_)
    run_layer(s, L, x, n, [&](const float* a_in, float* A) { mix(s, L, a_in, A); });
  const float* h = head_input(s, x, n);
  ProfileScope time("lm_head");
  const int64_t rows = static_cast<int64_t>(logit_rows.size()), d = config_.hidden_size;
  if (rows < n) {
    float* picked = s.alloc(rows * d);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(h + logit_rows[static_cast<size_t>(r)] * d, d, picked + r * d);
    h = picked;
  }
  head_.logits(s, h, rows, logits);
}

}  // namespace k3::model
