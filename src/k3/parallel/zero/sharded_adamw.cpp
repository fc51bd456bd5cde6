#include "k3/parallel/zero/sharded_adamw.h"

#include "k3/base/error.h"
#include "k3/kernels/adamw.h"

namespace k3::parallel {

ShardedAdamW::ShardedAdamW(optim::ParamSet params, std::vector<bool> decay,
                           optim::AdamWConfig config, const ShardLayout& layout)
    : params_(std::move(params)), decay_(std::move(decay)), config_(config) {
  K3_CHECK(decay_.size() == params_.slots.size(), "adamw: ", decay_.size(), " decay flags for ",
           params_.slots.size(), " parameters");
  int64_t floats = 0;
  for (size_t i = 0; i < params_.slots.size(); ++i) {
    const optim::ParamSlot& p = params_.slots[i];
    const FlatRange whole{p.offset, p.offset + static_cast<size_t>(p.numel())};
    layout.for_each_owner(whole, [&](int rank, FlatRange piece) {
      if (rank != layout.rank()) return;
      segments_.push_back({i, piece, floats});
      floats += static_cast<int64_t>(piece.size());
    });
  }
  m_ = Tensor::zeros({floats});
  v_ = Tensor::zeros({floats});
}

void ShardedAdamW::step(float lr, float grad_scale) {
  ++step_;
  for (const Segment& s : segments_) {
    const kernels::AdamWParams a{lr,
                                 config_.beta1,
                                 config_.beta2,
                                 config_.eps,
                                 decay_[s.slot] ? config_.weight_decay : 0.f,
                                 step_,
                                 grad_scale};
    kernels::adamw_step(a, params_.values + s.range.begin, params_.grads + s.range.begin,
                        m_.f32() + s.state_at, v_.f32() + s.state_at,
                        static_cast<int64_t>(s.range.size()));
  }
}

}  // namespace k3::parallel
