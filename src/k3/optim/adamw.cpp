#include "k3/optim/adamw.h"

#include <algorithm>

#include "k3/base/error.h"
#include "k3/kernels/adamw.h"

namespace k3::optim {

bool decays_by_default(const ParamSlot& p) {
  const auto above_one =
      std::count_if(p.shape.begin(), p.shape.end(), [](int64_t d) { return d > 1; });
  return above_one >= 2 && p.name.find("embed_tokens") == std::string::npos;
}

AdamW::AdamW(ParamSet params, AdamWConfig config, std::vector<bool> decay)
    : params_(std::move(params)),
      config_(config),
      decay_(std::move(decay)),
      m_(params_.slots),
      v_(params_.slots) {
  if (decay_.empty())
    for (const ParamSlot& p : params_.slots) decay_.push_back(decays_by_default(p));
  K3_CHECK(decay_.size() == params_.slots.size(), "adamw: ", decay_.size(), " decay flags for ",
           params_.slots.size(), " parameters");
}

void AdamW::step(float lr, float grad_scale) {
  ++step_;
  for (size_t i = 0; i < params_.slots.size(); ++i) {
    const ParamSlot& p = params_.slots[i];
    const kernels::AdamWParams a{
        lr,    config_.beta1, config_.beta2, config_.eps, decay_[i] ? config_.weight_decay : 0.f,
        step_, grad_scale};
    kernels::adamw_step(a, params_.values + p.offset, params_.grads + p.offset,
                        m_.at(i), v_.at(i), p.numel());
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.slots.size(); ++i) {
    const ParamSlot& p = params_.slots[i];
    out.emplace_back("exp_avg." + p.name, m_.view(i, p));
    out.emplace_back("exp_avg_sq." + p.name, v_.view(i, p));
  }
  return out;
}

}  // namespace k3::optim
