// The activation manager: every layer saves what its backward needs here, by name, and reads it
// back in backward. How a saved tensor is kept is the manager's policy, never the layer's code:
// "keep" holds the tensor as it is (it lives in the micro-batch's arena until its backward ends).
// Recompute, fp8 storage and offload are further policies of this class; a layer must therefore
// treat what load() returns as a fresh read-only view, not as the pointer it saved.
//
// Several micro-batches can be in flight at once (a pipeline schedule runs the forwards of some
// before the backwards of others): every tensor is saved under the id of its micro-batch, given
// when that micro-batch's forward starts, and one micro-batch's tensors are released on their own.
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

  // Saves `t` under `name` (e.g. "model.layers.3.self_attn.q") for micro-batch `micro_batch`.
  void save(int micro_batch, std::string_view name, const Tensor& t);
  // The tensor that micro-batch saved under `name`; throws when nothing was saved under it.
  Tensor load(int micro_batch, std::string_view name) const;
  bool contains(int micro_batch, std::string_view name) const;

  // Forgets what one micro-batch saved (after its backward, or after a forward without backward).
  void release(int micro_batch);
  // Forgets everything.
  void clear();

  ActivationPolicy policy() const { return policy_; }
  size_t count() const;  // tensors saved, over all micro-batches in flight
  size_t in_flight() const { return saved_.size(); }  // micro-batches holding tensors

 private:
  using Saved = std::unordered_map<std::string, Tensor>;
  const Saved* find(int micro_batch) const;

  ActivationPolicy policy_;
  std::unordered_map<int, Saved> saved_;
};

}  // namespace k3::activation
