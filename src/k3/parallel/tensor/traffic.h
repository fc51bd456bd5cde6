// What tensor parallelism moves over the tp group, counted analytically in the payload bytes of
// dist/comm.h (an all-reduce counts its n elements, a reduce-scatter its whole input, an
// all-gather its whole gathered output), so that a run's counters can be checked against it and
// a larger layout planned with it (docs/tensor_parallel.md).
//
// Per micro-batch of n tokens (this rank's, before any sequence split), hidden size d:
//   each layer's two regions (mixer, feed-forward), forward and backward:
//     replicated stream:   all-reduce n·d forward, all-reduce n·d backward;
//     sequence parallel:   all-gather n·d and reduce-scatter n·d forward; all-gather n·d twice
//                          (the output gradient, the input again) and reduce-scatter n·d backward;
//   a LatentMoE: all-reduce of the routed experts' latent output, n·L, forward;
//   the embedding: all-reduce n·d (or reduce-scatter n·d, and an all-gather n·d backward);
//   the LM head: all-gather of 3 floats per token and rank (tp·3·n), and the hidden states'
//     gradient, all-reduce n·d (or an all-gather n·d forward and a reduce-scatter n·d backward);
//     neither needs the input again in its backward;
//   under recomputed activations, every layer's forward collectives once more (its forward runs
//     again before its backward; the embedding and the head are not layers).
// Per optimizer step: the replicated parameters whose gradients are partial sums, all-reduced
// once, and the gradient norm's sum over tp (one double).
#pragma once

#include <cstdint>

#include "k3/dist/comm.h"
#include "k3/model/model.h"

namespace k3::parallel {

struct TpTraffic {
  int64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0;  // bytes
  int64_t total() const { return all_reduce + all_gather + reduce_scatter; }
  TpTraffic& operator+=(const TpTraffic& o);
};

// One micro-batch of `tokens` tokens through `c`'s forward and backward, on a tp group of `tp`;
// `recomputed`: the layers' forwards run twice.
TpTraffic tp_micro_batch_traffic(const model::ModelConfig& c, int tp, bool sequence_parallel,
                                 int64_t tokens, bool recomputed = false);
// The per-step sums: `model`'s summed gradients (ShardSpec::summed over tp) and the norm.
TpTraffic tp_step_traffic(const model::Model& model, int tp);
// What the counters of a group saw between two readings, in the same terms.
TpTraffic tp_traffic_between(const dist::Counters& before, const dist::Counters& after);

}  // namespace k3::parallel
