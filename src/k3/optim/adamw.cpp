#include "k3/optim/adamw.h"

#include "k3/kernels/adamw.h"

namespace k3 {

bool decays_by_default(const ParamSlot& p) {
  return p.shape.size() >= 2 && p.name.find("embed_tokens") == std::string::npos;
}

AdamW::AdamW(ParamSet params, AdamWConfig config)
    : params_(std::move(params)),
      config_(config),
      m_(Tensor::zeros({static_cast<int64_t>(params_.flat_size)})),
      v_(Tensor::zeros({static_cast<int64_t>(params_.flat_size)})) {
  for (const ParamSlot& p : params_.slots) decay_.push_back(decays_by_default(p));
}

void AdamW::step(float lr, float grad_scale) {
  ++step_;
  for (size_t i = 0; i < params_.slots.size(); ++i) {
    const ParamSlot& p = params_.slots[i];
    kernels::AdamWParams a{lr, config_.beta1, config_.beta2, config_.eps,
                           decay_[i] ? config_.weight_decay : 0.f, step_, grad_scale};
    kernels::adamw_step(a, params_.values + p.offset, params_.grads + p.offset, m_.f32() + p.offset,
                        v_.f32() + p.offset, p.numel());
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParamSlot& p : params_.slots) {
    out.emplace_back("exp_avg." + p.name, Tensor::view(m_.f32() + p.offset, p.shape));
    out.emplace_back("exp_avg_sq." + p.name, Tensor::view(v_.f32() + p.offset, p.shape));
  }
  return out;
}

}  // namespace k3
