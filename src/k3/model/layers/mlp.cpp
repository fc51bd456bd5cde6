#include "k3/model/layers/mlp.h"

#include "k3/model/layers/tp_region.h"

namespace k3::model {

kernels::GluParams glu_params(const ModelConfig& c) {
  kernels::GluParams p;
  p.kind = c.hidden_act == "silu" ? kernels::GluKind::SiLU : kernels::GluKind::SiTU;
  p.beta1 = static_cast<float>(c.activation_situ_beta);
  p.beta2 = static_cast<float>(c.activation_situ_linear_beta);
  return p;
}

GluMlp::GluMlp(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c, int64_t width)
    : prefix_(prefix), hidden_(c.hidden_size) {
  act_ = glu_params(c);
  const float std = static_cast<float>(c.initializer_range);
  gate_ = Linear(reg, prefix + ".gate_proj", hidden_, width, std, LinearMode::column);
  up_ = Linear(reg, prefix + ".up_proj", hidden_, width, std, LinearMode::column);
  down_ = Linear(reg, prefix + ".down_proj", width, hidden_, c.output_init_std(), LinearMode::row);
  width_ = gate_.out();
}

// The gathered input and the partial output are scratch above what the forward keeps.
void GluMlp::forward(const Step& s, const float* x, int64_t tokens, float* out) const {
  const TpRegion region(s, tokens, hidden_);
  const Acts acts = alloc_acts(s, tokens);
  ArenaScope scratch(s.arena);
  float* partial = region.partial(out);
  forward_part(s, region.enter(x), tokens, acts, partial);
  region.leave(partial, out);
  s.save(prefix_ + ".x", x, region.rows() * hidden_);
}

void GluMlp::backward(const Step& s, const float* dout, int64_t tokens, float* dx) const {
  ArenaScope scope(s.arena);
  const TpRegion region(s, tokens, hidden_);
  float* partial = region.partial(dx);
  backward_part(s, region.enter(s.load(prefix_ + ".x")), region.leave_backward(dout), tokens,
                partial, false);
  region.enter_backward(partial, dx);
}

GluMlp::Acts GluMlp::alloc_acts(const Step& s, int64_t tokens) const {
  const int64_t n = tokens * width_;
  return {s.alloc(n), s.alloc(n), s.alloc(n)};
}

void GluMlp::forward_part(const Step& s, const float* x, int64_t tokens, const Acts& a,
                          float* out) const {
  const int64_t n = tokens * width_;
  gate_.forward(s, x, tokens, a.gate);
  up_.forward(s, x, tokens, a.up);
  kernels::glu_forward(act_, a.gate, a.up, a.h, n);
  down_.forward(s, a.h, tokens, out);
  s.save(prefix_ + ".gate", a.gate, n);
  s.save(prefix_ + ".up", a.up, n);
  s.save(prefix_ + ".h", a.h, n);
}

void GluMlp::backward_part(const Step& s, const float* x, const float* dout, int64_t tokens,
                           float* dx, bool accumulate_dx) const {
  ArenaScope scope(s.arena);
  const int64_t n = tokens * width_;
  const float *g = s.load(prefix_ + ".gate"), *u = s.load(prefix_ + ".up");
  const float* h = s.load(prefix_ + ".h");
  float *dh = s.alloc(n), *dg = s.alloc(n), *du = s.alloc(n);
  down_.backward(s, h, dout, tokens, dh, false);
  kernels::glu_backward(act_, g, u, dh, dg, du, n);
  gate_.backward(s, x, dg, tokens, dx, accumulate_dx);
  up_.backward(s, x, du, tokens, dx, true);
}

}  // namespace k3::model
