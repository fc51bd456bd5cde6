// The dense GLU MLP: down_proj(act(gate_proj x) * up(up_proj x)), SiTU-GLU in K3. Under tensor
// parallelism gate_proj and up_proj are column-parallel and down_proj row-parallel: each tp rank
// holds width/tp of the intermediate features and the block is one tensor-parallel region.
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

  // The block with its region (layers/tp_region.h).
  void forward(const Step& s, const float* x, int64_t tokens, float* out) const override;
  void backward(const Step& s, const float* dout, int64_t tokens, float* dx) const override;

  // What the forward keeps for the backward, [tokens, this rank's width] each. A caller
  // allocates it before the scratch that holds the region's gathered input.
  struct Acts {
    float *gate, *up, *h;
  };
  Acts alloc_acts(const Step& s, int64_t tokens) const;
  // Inside a region that holds all `tokens` rows x: out is this rank's partial output; saves
  // `acts` (not x: the caller keeps x, and gives it back to the backward).
  void forward_part(const Step& s, const float* x, int64_t tokens, const Acts& acts,
                    float* out) const;
  // dx (written, or added to when accumulate_dx) is this rank's partial input gradient.
  void backward_part(const Step& s, const float* x, const float* dout, int64_t tokens, float* dx,
                     bool accumulate_dx) const;

  int64_t width() const { return width_; }  // this rank's intermediate features

 private:
  std::string prefix_;
  int64_t hidden_ = 0, width_ = 0;  // width_: this rank's intermediate features
  kernels::GluParams act_;
  Linear gate_, up_, down_;
};

}  // namespace k3::model
