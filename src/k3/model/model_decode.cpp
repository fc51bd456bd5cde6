// Model, its decoding: every layer through the same per-layer steps as the training forward
// (run_layer), each mixer by its decode call on its cache.
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
  K3_CHECK(n > 0, "decode needs at least one token");
  K3_CHECK(cache.length + n <= cache.max_len, "generation exceeds the cache of ", cache.max_len,
           " tokens");
  run_decode(arena, tokens, n, logits,
             [&](const Step& s, const Layer& L, const float* a_in, float* A) {
               L.mixer->decode(s, a_in, n, *cache.layers[static_cast<size_t>(L.index)], A);
             });
  cache.length += n;
}

void Model::decode_batch(Arena& arena, std::span<ModelCache* const> caches, const int32_t* tokens,
                         float* logits) {
  const int64_t B = static_cast<int64_t>(caches.size());
  K3_CHECK(B > 0, "batched decoding needs at least one sequence");
  for (const ModelCache* c : caches)
    K3_CHECK(c->length + 1 <= c->max_len, "generation exceeds the cache of ", c->max_len,
             " tokens");
  std::vector<DecodeCache*> layer_caches(static_cast<size_t>(B));
  run_decode(
      arena, tokens, B, logits,
      [&](const Step& s, const Layer& L, const float* a_in, float* A) {
        for (int64_t b = 0; b < B; ++b)
          layer_caches[static_cast<size_t>(b)] =
              caches[static_cast<size_t>(b)]->layers[static_cast<size_t>(L.index)].get();
        L.mixer->decode_batch(s, a_in, layer_caches, A);
      },
      true);
  for (ModelCache* c : caches) c->length += 1;
}

// The per-layer steps of the forward on n rows with `mix` as each layer's mixer; the logits of the
// last row (one sequence's n tokens) or of every row (a batch).
void Model::run_decode(Arena& arena, const int32_t* tokens, int64_t n, float* logits,
                       const DecodeMixer& mix, bool every_row) {
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
  if (every_row)
    head_.logits(s, h, n, logits);
  else
    head_.logits(s, h + (n - 1) * config_.hidden_size, 1, logits);
}

}  // namespace k3::model
