#include "k3/optim/optimizer.h"

#include <unordered_map>

#include "k3/base/error.h"

namespace k3::optim {

OptimizerParts split_by_optimizer(const ParamSet& params, const std::vector<Assignment>& plan) {
  std::unordered_map<std::string, const Assignment*> by_name;
  for (const Assignment& a : plan) by_name[a.name] = &a;
  OptimizerParts s;
  s.adamw = s.muon = ParamSet{{}, params.values, params.grads, params.flat_size};
  int64_t tensors[3] = {}, values[3] = {};
  for (const ParamSlot& p : params.slots) {
    auto it = by_name.find(p.name);
    K3_CHECK_CTX(it != by_name.end(), (ErrorContext{"", p.name, -1}),
                 "the optimizer plan does not assign this parameter");
    const Assignment& a = *it->second;
    K3_CHECK_CTX(a.shape == p.shape, (ErrorContext{"", p.name, -1}),
                 "the optimizer plan was made for shape ", shape_str(a.shape),
                 ", the parameter is ", shape_str(p.shape));
    if (a.optimizer == OptimizerKind::adamw) {
      s.adamw.slots.push_back(p);
      s.decay.push_back(a.weight_decay);
    } else if (a.optimizer == OptimizerKind::muon) {
      s.muon.slots.push_back(p);
      s.block_rows.push_back(a.block_rows);
    }
    ++tensors[static_cast<int>(a.optimizer)];
    values[static_cast<int>(a.optimizer)] += shape_numel(p.global());  // not the shard's
  }
  for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::muon, OptimizerKind::frozen}) {
    const int i = static_cast<int>(k);
    s.summary += std::string(s.summary.empty() ? "" : ", ") + optimizer_name(k) + " " +
                 std::to_string(tensors[i]) + " tensors (" + std::to_string(values[i]) + " values)";
  }
  return s;
}

AdamWConfig adamw_config(const OptimizerConfig& c) {
  return {c.beta1, c.beta2, c.eps, c.weight_decay};
}

MuonConfig muon_config(const OptimizerConfig& c) {
  return {c.muon_momentum, c.weight_decay, c.ns_steps, c.ns_precision};
}

Optimizer::Optimizer(const ParamSet& params, const std::vector<Assignment>& plan,
                     OptimizerConfig config)
    : Optimizer(split_by_optimizer(params, plan), config) {}

Optimizer::Optimizer(OptimizerParts parts, OptimizerConfig config)
    : adamw_(std::move(parts.adamw), adamw_config(config), std::move(parts.decay)),
      muon_(std::move(parts.muon), std::move(parts.block_rows), muon_config(config)),
      summary_(std::move(parts.summary)) {}

void Optimizer::step(float lr, float grad_scale) {
  adamw_.step(lr, grad_scale);
  muon_.step(lr, grad_scale);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() const {
  auto out = adamw_.state_tensors();
  for (auto& t : muon_.state_tensors()) out.push_back(std::move(t));
  return out;
}

}  // namespace k3::optim
