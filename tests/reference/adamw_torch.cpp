// Driver for adamw_torch.py: reads WORKDIR/inputs.safetensors — the parameters "param.<name>",
// per step the gradients "grad.<step>.<name>" and learning rate "lr.<step>", metadata "steps" and
// "grad_scale" — runs k3lab's AdamW (spec defaults: β 0.9/0.95, ε 1e-8, decoupled λ 0.1, decay
// by decays_by_default) and writes WORKDIR/outputs.safetensors: "param.<step>.<name>" after every
// step and the final "exp_avg.<name>", "exp_avg_sq.<name>".
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "driver.h"
#include "k3/base/error.h"
#include "k3/optim/adamw.h"
#include "k3/tensor/safetensors.h"

using namespace k3;

static void run(const std::string& dir) {
  const Safetensors in = load_safetensors(dir + "/inputs.safetensors");
  const int steps = std::stoi(in.metadata.at("steps"));
  const float grad_scale = std::stof(in.metadata.at("grad_scale"));

  // The parameters, packed into one flat buffer as the model's registry would.
  optim::ParamSet set;
  for (const auto& [name, t] : in.tensors)
    if (name.rfind("param.", 0) == 0) {
      set.slots.push_back({name.substr(6), t.shape(), set.flat_size});
      set.flat_size += static_cast<size_t>(t.numel());
    }
  K3_CHECK(!set.slots.empty(), "no param.<name> tensors in the inputs");
  std::vector<float> values(set.flat_size), grads(set.flat_size);
  for (const optim::ParamSlot& p : set.slots)
    std::memcpy(values.data() + p.offset, in.get("param." + p.name, p.shape).f32(),
                static_cast<size_t>(p.numel()) * 4);
  set.values = values.data();
  set.grads = grads.data();

  optim::AdamW opt(set, optim::AdamWConfig{});
  Safetensors out;
  for (int step = 0; step < steps; ++step) {
    const std::string s = std::to_string(step);
    for (const optim::ParamSlot& p : set.slots)
      std::memcpy(grads.data() + p.offset, in.get("grad." + s + "." + p.name, p.shape).f32(),
                  static_cast<size_t>(p.numel()) * 4);
    opt.step(in.get("lr." + s, {1}).f32()[0], grad_scale);
    for (const optim::ParamSlot& p : set.slots)
      out.tensors.emplace_back("param." + s + "." + p.name,
                               reference::copy_of(Tensor::view(values.data() + p.offset, p.shape)));
  }
  for (const auto& [name, t] : opt.state_tensors())
    out.tensors.emplace_back(name, reference::copy_of(t));
  save_safetensors(dir + "/outputs.safetensors", out);
}

int main(int argc, char** argv) {
  return k3::reference::driver_main(argc, argv, 1, "WORKDIR",
                                    [](const std::vector<std::string>& a) { run(a[0]); });
}
