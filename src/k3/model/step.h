// What a layer needs to run one micro-batch: the step arena (activations and scratch), the
// activation manager, and the parameters. Layers never allocate memory any other way.
#pragma once

#include <cstdint>
#include <string>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/model/params.h"

namespace k3 {

struct Step {
  Arena& arena;
  ActivationManager& acts;
  ParamRegistry& params;
  bool training = true;  // save activations for backward

  float* alloc(int64_t n) const { return arena.allocate_array<float>(static_cast<size_t>(n)); }
  void save(const std::string& name, float* p, int64_t n) const {
    if (training) acts.save(name, Tensor::view(p, {n}));
  }
  float* load(const std::string& name) const { return acts.load(name).f32(); }
};

}  // namespace k3
