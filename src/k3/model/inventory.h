// What a model is made of, without allocating it: every tensor (K3 name, global shape, the dtype
// the released checkpoint stores it in) and parameter counts per component, total and active.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/model/model.h"

namespace k3::model {

struct TensorEntry {
  std::string name;
  Shape shape;
  std::string release_dtype;  // "bf16", or "fp32" for the tensors K3 keeps in fp32
  std::string component;
};

struct ComponentCount {
  std::string component;
  int64_t total = 0;
  int64_t active = 0;  // per token: routed experts count k of E
};

// `model` may be constructed without allocation.
std::vector<TensorEntry> tensor_inventory(const Model& model);
std::vector<ComponentCount> parameter_counts(const Model& model);  // last entry: "total"

}  // namespace k3::model
