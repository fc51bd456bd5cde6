// Driver for k3_model.py: builds the K3 model of a config (KDA, gated MLA, LatentMoE, Attention
// Residuals) from a seed and writes
//   WEIGHTS  its weights (K3 names), which the PyTorch side loads. The AttnRes pseudo-queries
//            (*res_proj*) start at zero, a uniform mix; they are set to N(0, 0.1²) here so that the
//            mixing weights differ between rows, and the router biases to N(0, 0.01²) so that the
//            biased selection differs from the unbiased one;
//   RESULTS  logits [B*T, V] (forward_logits), loss (the mean over the counted targets, from a
//            training forward_backward with grad_scale 1/count) and grad.<name> for every parameter.
// BATCH holds tokens and targets [B, T] as float32.
#include <string>

#include "driver.h"
#include "k3/base/philox.h"

namespace {

constexpr float kResProjStd = 0.1f;
constexpr float kRouterBiasStd = 0.01f;

void run(const std::string& config_path, uint64_t seed, const std::string& batch_path,
         const std::string& weights_path, const std::string& results_path) {
  k3::Model model(k3::load_model_config(config_path));
  model.initialize(seed);
  k3::ParamRegistry& params = model.params();
  int perturbed = 0;
  for (int i = 0; i < params.size(); ++i) {
    const std::string& name = params.info(i).name;
    const bool res = name.find("res_proj") != std::string::npos;
    const bool bias = k3::is_router_bias(name);
    if (!res && !bias) continue;
    k3::Tensor w = params.value(i);
    k3::fill_normal(w.f32(), w.numel(), seed + 1, static_cast<uint64_t>(i), 0, 0.f,
                    res ? kResProjStd : kRouterBiasStd);
    ++perturbed;
  }
  K3_CHECK(perturbed > 0, config_path, ": no AttnRes pseudo-query or router bias to perturb");
  k3::reference::save_weights(params, weights_path);

  const k3::reference::Batch b = k3::reference::load_batch(batch_path);
  k3::Arena arena(size_t{1} << 30, false);
  k3::ActivationManager acts;
  k3::Safetensors out;
  k3::reference::add_model_outputs(model, arena, acts, b, batch_path, out);
  k3::save_safetensors(results_path, out);
}

}  // namespace

int main(int argc, char** argv) { return k3::reference::model_driver_main(argc, argv, run); }
