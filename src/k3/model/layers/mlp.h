// The dense GLU MLP: down_proj(act(gate_proj x) * up(up_proj x)), SiTU-GLU in K3.
#pragma once

#include <cstdint>
#include <string>

#include "k3/kernels/glu.h"
#include "k3/model/config.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/mixer.h"

namespace k3::model {

// The GLU activation the config names (hidden_act and the SiTU betas).
kernels::GluParams glu_params(const ModelConfig& c);

class GluMlp final : public FeedForward {
 public:
  GluMlp(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c, int64_t width);

  void forward(const Step& s, const float* x, int64_t rows, float* out) const override;
  void backward(const Step& s, const float* dout, int64_t rows, float* dx) const override;

 private:
  std::string prefix_;
  int64_t hidden_ = 0, width_ = 0;
  kernels::GluParams act_;
  Linear gate_, up_, down_;
};

}  // namespace k3::model
