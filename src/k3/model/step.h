// What a layer needs to run one micro-batch: the step arena (activations and scratch), the
// activation manager, the parameters, and the process grid (groups of size 1 in one process).
// Layers never allocate memory any other way, and reach other processes only through `grid`.
#pragma once

#include <cstdint>
#include <string>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/dist/grid.h"
#include "k3/model/params.h"

namespace k3::model {

struct Step {
  Arena& arena;
  activation::ActivationManager& acts;
  ParamRegistry& params;
  bool training = true;  // save activations for backward
  const dist::ProcessGrid& grid = dist::single_process();

  float* alloc(int64_t n) const { return arena.allocate_array<float>(static_cast<size_t>(n)); }
  // The manager never writes through a saved view (load() is read-only by contract).
  void save(const std::string& name, const float* p, int64_t n) const {
    if (training) acts.save(name, Tensor::view(const_cast<float*>(p), {n}));
  }
  float* load(const std::string& name) const { return acts.load(name).f32(); }
};

}  // namespace k3::model
