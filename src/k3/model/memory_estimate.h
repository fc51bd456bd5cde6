// What a model takes in memory to train, known before anything is allocated: its parameters and
// gradients (two fp32 flat buffers of the registry's layout), the step arena one micro-batch of
// B sequences of T tokens fills in forward + backward (the activations every layer saves and the
// scratch of the widest backward) and the MoE layers' balancing histograms. The optimizer's state
// and the data are the run's part (train/preflight.h).
#pragma once

#include <cstdint>

#include "k3/model/model.h"

namespace k3::model {

struct ModelMemory {
  int64_t parameters = 0;       // values, without the flat buffer's alignment padding
  double parameter_bytes = 0;   // the flat value buffer, padding included
  double gradient_bytes = 0;    // the flat gradient buffer, the same layout
  double activation_bytes = 0;  // step arena of one training micro-batch, at most
  double balancing_bytes = 0;   // Quantile Balancing's histograms, one per MoE layer
};

// An upper estimate of the step arena's peak over one forward_backward of B x T tokens (see the
// formula in memory_estimate.cpp). Measured peaks of the models in configs/ lie within 2% below it.
double activation_bytes(const ModelConfig& c, int64_t B, int64_t T);

// `model` may be constructed without allocation: only its registry is read.
ModelMemory model_memory(const Model& model, int64_t B, int64_t T);

}  // namespace k3::model
