// Driver for attention.py: reads WORKDIR/inputs.safetensors (q [B, T, H, dqk + dr], k [B, T, H,
// dqk], v [B, T, H, dv], dout [B, T, H, dv], kr [B, T, dr] when dr > 0, metadata "dr" and "scale"),
// runs the tiled attention forward and backward, and writes WORKDIR/outputs.safetensors (out, lse,
// dq, dk, dv, and dkr when dr > 0).
#include "k3/kernels/attention.h"

#include <cstdio>
#include <string>

#include "driver.h"
#include "k3/base/error.h"
#include "k3/tensor/safetensors.h"

using namespace k3;

static void run(const std::string& dir) {
  const Safetensors in = load_safetensors(dir + "/inputs.safetensors");
  const Tensor* kp = in.find("k");
  const Tensor* vp = in.find("v");
  K3_CHECK(kp && vp && kp->ndim() == 4 && vp->ndim() == 4, "inputs need 4-d tensors k and v");
  kernels::AttentionShape s;
  s.B = kp->dim(0);
  s.T = kp->dim(1);
  s.H = kp->dim(2);
  s.dqk = kp->dim(3);
  s.dv = vp->dim(3);
  s.dr = std::stoll(in.metadata.at("dr"));
  s.scale = std::stof(in.metadata.at("scale"));
  const Tensor& q = in.get("q", {s.B, s.T, s.H, s.dqk + s.dr});
  const Tensor& v = in.get("v", {s.B, s.T, s.H, s.dv});
  const Tensor& dout = in.get("dout", {s.B, s.T, s.H, s.dv});
  const float* kr = s.dr > 0 ? in.get("kr", {s.B, s.T, s.dr}).f32() : nullptr;

  Tensor out = Tensor::empty({s.B, s.T, s.H, s.dv}), lse = Tensor::empty({s.B, s.H, s.T}),
         dq = Tensor::empty(q.shape()), dk = Tensor::empty(kp->shape()),
         dv = Tensor::empty(v.shape()), dkr = Tensor::empty({s.B, s.T, s.dr});
  kernels::attention_forward(s, q.f32(), kp->f32(), kr, v.f32(), out.f32(), lse.f32());
  kernels::attention_backward(s, q.f32(), kp->f32(), kr, v.f32(), out.f32(), lse.f32(), dout.f32(),
                              dq.f32(), dk.f32(), kr ? dkr.f32() : nullptr, dv.f32());

  Safetensors result;
  result.tensors = {{"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
  if (kr) result.tensors.emplace_back("dkr", dkr);
  save_safetensors(dir + "/outputs.safetensors", result);
}

int main(int argc, char** argv) {
  return k3::reference::driver_main(argc, argv, 1, "WORKDIR",
                                    [](const std::vector<std::string>& a) { run(a[0]); });
}
