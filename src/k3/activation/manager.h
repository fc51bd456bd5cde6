// The activation manager: every layer saves what its backward needs here, by name, and reads it
// back in backward. How a saved tensor is kept is the manager's policy, never the layer's code:
// "keep" holds the tensor as it is (it lives in the step arena until the step ends). Recompute,
// fp8 storage and offload are further policies of this class; a layer must therefore treat what
// load() returns as a fresh read-only view, not as the pointer it saved.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>

#include "k3/tensor/tensor.h"

namespace k3::activation {

enum class ActivationPolicy { Keep };

class ActivationManager {
 public:
  explicit ActivationManager(ActivationPolicy policy = ActivationPolicy::Keep) : policy_(policy) {}

  // Saves `t` under `name` (e.g. "model.layers.3.self_attn.q") for the current micro-batch.
  void save(std::string_view name, const Tensor& t);
  // The tensor saved under `name`; throws when nothing was saved under it.
  Tensor load(std::string_view name) const;
  bool contains(std::string_view name) const;

  // Forget everything saved (after backward, or after a forward without backward).
  void clear();

  ActivationPolicy policy() const { return policy_; }
  size_t count() const { return saved_.size(); }

 private:
  ActivationPolicy policy_;
  std::unordered_map<std::string, Tensor> saved_;
};

}  // namespace k3::activation
