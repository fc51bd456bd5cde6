// The two slots of a decoder layer, as interfaces the stack drives without knowing which layer
// fills them: a sequence mixer (gated attention, gated MLA or KDA) and a feed-forward block
// (the dense GLU MLP or the Stable LatentMoE).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "k3/model/step.h"

namespace k3::model {

// Under tensor parallelism each layer runs as one tensor-parallel region (layers/tp_region.h): the
// B·T tokens of a micro-batch are those of `x` and `out` on every rank, or under sequence
// parallelism this rank's slice of them (local_rows); each layer gathers and scatters them itself.

// The tokens a mixer mixes: B rows of T tokens, each row one sequence; or, with doc_starts, one
// row (B = 1) of T tokens holding packed documents (doc_starts as in kernels/kda/sequences.h;
// under context parallelism T is this rank's tokens and doc_starts the whole sequence's, in
// global positions, the same on every rank), each token seeing only its own document.
struct Sequences {
  int64_t B = 1, T = 0;
  std::span<const int64_t> doc_starts = {};
};

// Whatever a mixer keeps between decoding calls (keys and values, MLA's latents, KDA's states).
struct DecodeCache {
  virtual ~DecodeCache() = default;
  int64_t length = 0;  // tokens already fed
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  // x, out: this rank's rows of [B*T, hidden] of `seq`. Forward saves what backward needs under
  // the layer's name. A mixer without packed documents throws k3::Error when seq has doc_starts.
  virtual void forward(const Step& s, const float* x, const Sequences& seq, float* out) const = 0;
  // dx is written; parameter gradients accumulate.
  virtual void backward(const Step& s, const float* dout, const Sequences& seq,
                        float* dx) const = 0;
  virtual std::unique_ptr<DecodeCache> make_cache(int64_t max_len) const = 0;
  // Feeds `rows` tokens of one sequence at positions cache.length..; advances cache.length. A
  // prefill (rows > 1 into an empty cache) runs the layer's forward, keeping what decoding needs.
  virtual void decode(const Step& s, const float* x, int64_t rows, DecodeCache& cache,
                      float* out) const = 0;
  // One token of each of caches.size() sequences, each at its own position (its cache's length):
  // x, out [caches.size(), hidden]. The projections run for all rows at once. Each cache comes
  // from make_cache and advances by one.
  virtual void decode_batch(const Step& s, const float* x, std::span<DecodeCache* const> caches,
                            float* out) const = 0;
};

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // x, out: this rank's rows of the micro-batch's [tokens, hidden].
  virtual void forward(const Step& s, const float* x, int64_t tokens, float* out) const = 0;
  virtual void backward(const Step& s, const float* dout, int64_t tokens, float* dx) const = 0;
};

}  // namespace k3::model
