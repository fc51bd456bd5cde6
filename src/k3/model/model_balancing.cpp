// Model, its MoE layers' router balancing: the once-per-global-batch update, the dispatch
// statistics, and the balancers' state for checkpoints.
#include <algorithm>
#include <span>

#include "k3/base/error.h"
#include "k3/model/model.h"

namespace k3::model {

std::map<int64_t, ExpertLoadStats> Model::end_global_batch(const CountReducer& reduce) {
  std::map<int64_t, ExpertLoadStats> out;
  for (auto& [layer, moe] : moe_layers_)
    if (holds_layer(layer)) out[layer] = moe->end_global_batch(params_, reduce);
  return out;
}

void Model::discard_global_batch() {
  for (auto& [layer, moe] : moe_layers_)
    if (holds_layer(layer)) moe->discard_global_batch();
}

std::map<int64_t, DispatchStats> Model::take_dispatch_stats() const {
  std::map<int64_t, DispatchStats> out;
  for (const auto& [layer, moe] : moe_layers_)
    if (holds_layer(layer)) out[layer] = moe->take_dispatch_stats(grid_.ep());
  return out;
}

std::vector<std::pair<std::string, Tensor>> Model::balancer_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [layer, moe] : moe_layers_) {
    const std::vector<float> state = moe->balancer().state();
    if (state.empty()) continue;  // the bias balancer: the bias is all its state
    const int64_t n = static_cast<int64_t>(state.size());
    Tensor t = Tensor::empty({n});
    std::copy(state.begin(), state.end(), t.f32());
    // Under pipeline parallelism only the layer's stage balances it: its state comes from there.
    if (const int owner = stage_owner(split_.stage_of_layer(layer)); owner >= 0)
      grid_.pp().broadcast(t.f32(), n, owner);
    out.emplace_back(moe->balancer_state_name(), t);
  }
  return out;
}

void Model::restore_balancer_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                   const std::string& origin) {
  for (auto& [layer, moe] : moe_layers_) {
    const int64_t n = static_cast<int64_t>(moe->balancer().state().size());
    if (n == 0) continue;
    const std::string name = moe->balancer_state_name();
    auto it =
        std::find_if(tensors.begin(), tensors.end(), [&](auto& p) { return p.first == name; });
    K3_CHECK_CTX(it != tensors.end() && it->second.shape() == Shape{n},
                 (ErrorContext{origin, name, -1}),
                 "the checkpoint lacks this layer's balancer state [", n, "]");
    moe->balancer().restore(std::span<const float>(it->second.f32(), static_cast<size_t>(n)));
  }
}

}  // namespace k3::model
