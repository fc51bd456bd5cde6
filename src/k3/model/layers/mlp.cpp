#include "k3/model/layers/mlp.h"

namespace k3::model {

kernels::GluParams glu_params(const ModelConfig& c) {
  kernels::GluParams p;
  p.kind = c.hidden_act == "silu" ? kernels::GluKind::SiLU : kernels::GluKind::SiTU;
  p.beta1 = static_cast<float>(c.activation_situ_beta);
  p.beta2 = static_cast<float>(c.activation_situ_linear_beta);
  return p;
}

GluMlp::GluMlp(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c, int64_t width)
    : prefix_(prefix), hidden_(c.hidden_size), width_(width) {
  act_ = glu_params(c);
  const float std = static_cast<float>(c.initializer_range);
  gate_ = Linear(reg, prefix + ".gate_proj", hidden_, width, std);
  up_ = Linear(reg, prefix + ".up_proj", hidden_, width, std);
  down_ = Linear(reg, prefix + ".down_proj", width, hidden_, c.output_init_std());
}

void GluMlp::forward(const Step& s, const float* x, int64_t rows, float* out) const {
  const int64_t n = rows * width_;
  float *g = s.alloc(n), *u = s.alloc(n), *h = s.alloc(n);
  gate_.forward(s, x, rows, g);
  up_.forward(s, x, rows, u);
  kernels::glu_forward(act_, g, u, h, n);
  down_.forward(s, h, rows, out);
  s.save(prefix_ + ".x", x, rows * hidden_);
  s.save(prefix_ + ".gate", g, n);
  s.save(prefix_ + ".up", u, n);
  s.save(prefix_ + ".h", h, n);
}

void GluMlp::backward(const Step& s, const float* dout, int64_t rows, float* dx) const {
  ArenaScope scope(s.arena);
  const int64_t n = rows * width_;
  const float *x = s.load(prefix_ + ".x"), *g = s.load(prefix_ + ".gate");
  const float *u = s.load(prefix_ + ".up"), *h = s.load(prefix_ + ".h");
  float *dh = s.alloc(n), *dg = s.alloc(n), *du = s.alloc(n);
  down_.backward(s, h, dout, rows, dh, false);
  kernels::glu_backward(act_, g, u, dh, dg, du, n);
  gate_.backward(s, x, dg, rows, dx, false);
  up_.backward(s, x, du, rows, dx, true);
}

}  // namespace k3::model
