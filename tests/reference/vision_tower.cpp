// Driver for vision_tower.py: the vision tower and projector of CONFIG, initialized from a fixed
// seed (norm weights moved off 1 so their gradients show), run on WORK/inputs.safetensors:
//   images [n, 3, S, S] and dout [n · tokens_per_image, hidden], the gradient of the output.
// Writes WORK/weights.safetensors (K3 names) and WORK/outputs.safetensors: out, and grad.<name>
// of every parameter.
#include "k3/model/vision/vision_tower.h"

#include <cmath>
#include <string>

#include "driver.h"

namespace {

void run(const std::string& config_path, const std::string& work) {
  const k3::model::ModelConfig c = k3::model::load_model_config(config_path);
  K3_CHECK(c.has_vision(), config_path, " has no vision tower");
  k3::model::ParamRegistry params;
  const k3::model::VisionTower tower(params, c);
  params.allocate();
  params.initialize(5);
  for (int i = 0; i < params.size(); ++i)
    if (params.info(i).name.find("norm") != std::string::npos)
      for (int64_t j = 0; j < params.info(i).numel(); ++j)
        params.value(i).f32()[j] = 1.f + 0.2f * std::sin(static_cast<float>(j + 3 * i));
  k3::reference::save_weights(params, work + "/weights.safetensors");

  const k3::Safetensors in = k3::load_safetensors(work + "/inputs.safetensors");
  const k3::Tensor* images = in.find("images");
  const k3::Tensor* dout = in.find("dout");
  K3_CHECK(images && dout && images->ndim() == 4 && images->dim(1) == 3 &&
               dout->dim(0) == images->dim(0) * tower.tokens_per_image(),
           "inputs: needs images [n, 3, S, S] and dout [n · tokens, hidden]");
  const int64_t n = images->dim(0);
  k3::Arena arena(size_t{256} << 20, false);
  k3::activation::ActivationManager acts;
  const k3::model::Step s{arena, acts, params};
  k3::Tensor out = k3::Tensor::empty({n * tower.tokens_per_image(), tower.width()});
  tower.forward(s, images->f32(), n, out.f32());
  tower.backward(s, images->f32(), n, dout->f32());
  k3::Safetensors results;
  results.tensors.emplace_back("out", out);
  for (int i = 0; i < params.size(); ++i)
    results.tensors.emplace_back("grad." + params.info(i).name,
                                 k3::reference::copy_of(params.grad(i)));
  k3::save_safetensors(work + "/outputs.safetensors", results);
}

}  // namespace

int main(int argc, char** argv) {
  return k3::reference::driver_main(argc, argv, 2, "CONFIG WORK",
                                    [](const std::vector<std::string>& a) { run(a[0], a[1]); });
}
