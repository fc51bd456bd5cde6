// What a model takes in memory to train, known before anything is allocated: its parameters and
// gradients (two fp32 flat buffers of the registry's layout), the step arena one micro-batch of
// B sequences of T tokens fills in forward + backward (the activations every layer saves and the
// scratch of the widest backward) and the MoE layers' balancing histograms. The optimizer's state
// and the data are the run's part (train/preflight/memory_estimate.h).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "k3/activation/policy.h"
#include "k3/model/model.h"

namespace k3::model {

struct ModelMemory {
  int64_t parameters = 0;       // values, without the flat buffer's alignment padding
  double parameter_bytes = 0;   // the flat value buffer, padding included
  double gradient_bytes = 0;    // the flat gradient buffer, the same layout
  double activation_bytes = 0;  // step arena of one training micro-batch, at most
  double balancing_bytes = 0;   // the balancers' counts, one per MoE layer
};

// One rank's place in a run's layout and how it holds its activations (docs/activations.md).
struct ActivationLayout {
  int64_t rows = 1, tokens = 1;  // one micro-batch on this rank: rows of `tokens` tokens (after cp)
  // The layer ranges [first, end) of this rank's pipeline chunks; empty: every layer. The chunk
  // from layer 0 holds the embedding, the one to the last layer the head.
  std::vector<std::pair<int64_t, int64_t>> chunks;
  int in_flight = 1;  // micro-batch chunks it holds activations for at once (the pp schedule)
  int cp = 1;         // KCP's spans, pairs and halos; ring attention's blocks
  int tp = 1;         // each rank holds its heads and columns of the parts
  bool sequence_parallel = false;  // and its share of the residual stream's tokens
  int ep = 1;                      // each rank computes its experts' rows of the whole ep group
  bool moonep = false;             // MoonEP: S·K rows a rank, whatever the routing
  int64_t replica_slots = 0;       // MoonEP: replicas of other ranks' experts a rank hosts
  // The policy of the tensors holding the most (under rules, the most holding of them all).
  activation::Policy policy = activation::Policy::Keep;
  activation::Granularity granularity = activation::Granularity::Sublayer;
  double budget = 0;  // activation.budget in bytes; 0: none
};

// An upper estimate of the step arena's peak plus the activation pool's over one step of a rank
// (see the formula in memory_estimate.cpp).
double activation_bytes(const ModelConfig& c, const ActivationLayout& layout);
// One process keeping everything, B x T tokens. Measured peaks of the models in configs/ lie
// within 2% below it.
double activation_bytes(const ModelConfig& c, int64_t B, int64_t T);

// `model` may be constructed without allocation: only its registry is read.
ModelMemory model_memory(const Model& model, const ActivationLayout& layout);

}  // namespace k3::model
