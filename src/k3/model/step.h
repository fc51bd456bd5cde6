// What a layer needs to run one micro-batch: the micro-batch's arena (activations and scratch),
// the activation manager and the micro-batch's id in it, the parameters, and the process grid
// (groups of size 1 in one process). Layers never allocate memory any other way, reach other
// processes only through `grid`, and never see which micro-batch they run.
#pragma once

#include <cstdint>
#include <string>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/dist/grid.h"
#include "k3/kernels/gemm.h"
#include "k3/model/deferred_weight_grads.h"
#include "k3/model/params.h"

namespace k3::model {

struct Step {
  Arena& arena;
  activation::ActivationManager& acts;
  ParamRegistry& params;
  bool training = true;  // save activations for backward
  const dist::ProcessGrid& grid = dist::single_process();
  int micro_batch = 0;  // scopes what save() keeps in the activation manager
  // Under sequence parallelism, outside tensor-parallel regions each tp rank holds only its slice
  // of the micro-batch's tokens (layers/tp_region.h). Decoding never splits its few tokens.
  bool sequence_parallel = false;
  // Set by zero-bubble pipeline schedules: weight-gradient products are queued there, to run
  // after the input-gradient half of the backward (deferred_weight_grads.h).
  DeferredWeightGrads* deferred_weight_grads = nullptr;
  // The matrix products' precision (train.precision): under bf16 their operands are rounded to
  // bf16, weights read from the registry's bf16 copy, and accumulated in fp32.
  kernels::Precision precision = kernels::Precision::F32;

  // The same step without saving anything for a backward (decoding, prefill).
  Step inference() const {
    return {arena, acts, params, false, grid, micro_batch, sequence_parallel, nullptr, precision};
  }

  // Parameter i's bf16 copy when the products run in bf16, else null: GemmArgs::A_bf16 / B_bf16.
  const uint16_t* weight_bf16(int i) const {
    return precision == kernels::Precision::BF16 ? params.value_bf16(i) : nullptr;
  }

  float* alloc(int64_t n) const { return arena.allocate_array<float>(static_cast<size_t>(n)); }
  // The manager never writes through a saved view (load() is read-only by contract).
  // A saved tensor's contents must be final when it is saved (the manager may copy it now).
  void save(const std::string& name, const float* p, int64_t n) const {
    if (training) acts.save(micro_batch, name, p, n);
  }
  // Integers held as floats, or copies of parameters: never stored lossily.
  void save_exact(const std::string& name, const float* p, int64_t n) const {
    if (training) acts.save(micro_batch, name, p, n, true);
  }
  // Statistics of the forward (expert loads, dispatch counts) are recorded once per training
  // forward, not again when the activation manager re-runs it.
  bool records_statistics() const { return training && !acts.recomputing(); }
  float* load(const std::string& name) const { return acts.load(micro_batch, name).f32(); }
  // dW += dyᵀ x, or queued while the weight gradients are deferred.
  void weight_grad(const float* dy, const float* x, int64_t rows, int64_t out, int64_t in,
                   float* dw) const {
    model::weight_grad(deferred_weight_grads, dy, x, rows, out, in, dw, precision);
  }
};

}  // namespace k3::model
