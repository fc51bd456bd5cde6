// Driver for cross_entropy.py: reads WORKDIR/inputs.safetensors (h [N, d], w [V, d], targets [N]
// as float, metadata "chunk"), runs the fused LM head + cross-entropy with the mean loss
// (grad_scale = 1 / count) and writes WORKDIR/outputs.safetensors (loss, count, dh, dw).
#include "k3/kernels/cross_entropy.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "driver.h"
#include "k3/base/error.h"
#include "k3/tensor/safetensors.h"

using namespace k3;

static Tensor scalar(float v) {
  Tensor t = Tensor::empty({1});
  t.f32()[0] = v;
  return t;
}

static void run(const std::string& dir) {
  const Safetensors in = load_safetensors(dir + "/inputs.safetensors");
  const Tensor* hp = in.find("h");
  const Tensor* wp = in.find("w");
  K3_CHECK(hp && wp && hp->ndim() == 2 && wp->ndim() == 2, "inputs need 2-d tensors h and w");
  const int64_t N = hp->dim(0), d = hp->dim(1), V = wp->dim(0);
  const Tensor& h = in.get("h", {N, d});
  const Tensor& w = in.get("w", {V, d});
  const Tensor& tf = in.get("targets", {N});
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const float t = tf.f32()[i];
    K3_CHECK(t == std::floor(t), "target ", i, " is not an integer: ", t);
    targets[i] = static_cast<int32_t>(t);
  }
  const int64_t chunk = std::stoll(in.metadata.at("chunk"));

  int64_t count = 0;
  for (int32_t t : targets) count += t != -100;
  K3_CHECK(count > 0, "every target is ignored");
  Tensor dh = Tensor::empty({N, d}), dw = Tensor::zeros({V, d}),
         workspace = Tensor::empty({chunk, V});
  kernels::LmHeadCeArgs a;
  a.h = h.f32();
  a.w = w.f32();
  a.targets = targets.data();
  a.N = N;
  a.d = d;
  a.V = V;
  a.grad_scale = 1.0f / static_cast<float>(count);
  a.chunk = chunk;
  a.workspace = workspace.f32();
  a.dh = dh.f32();
  a.dw = dw.f32();
  const kernels::LossSum loss = kernels::lm_head_cross_entropy(a);

  Safetensors out;
  out.tensors = {{"loss", scalar(static_cast<float>(loss.sum / static_cast<double>(loss.count)))},
                 {"count", scalar(static_cast<float>(loss.count))},
                 {"dh", dh},
                 {"dw", dw}};
  save_safetensors(dir + "/outputs.safetensors", out);
}

int main(int argc, char** argv) {
  return k3::reference::driver_main(argc, argv, 1, "WORKDIR",
                                    [](const std::vector<std::string>& a) { run(a[0]); });
}
