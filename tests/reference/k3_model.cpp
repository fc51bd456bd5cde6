// Driver for k3_model.py: builds the K3 model of a config (KDA, gated MLA, LatentMoE, Attention
// Residuals) from a seed and writes
//   WEIGHTS  its weights (K3 names), which the PyTorch side loads. The parameters that start at an
//            identity value, behind which a dropped term would hide, are moved away from it here:
//            the AttnRes pseudo-queries (*res_proj*, zero: a uniform mix) to N(0, 0.1²) so that the
//            mixing weights differ between rows; the router biases (zero) to N(0, 0.01²) so that
//            the biased selection differs from the unbiased one; every norm weight (*norm.weight:
//            the RMSNorms, KDA's output norm, MLA's q/kv norms, the latent expert norm, the AttnRes
//            key norms; one) to N(1, 0.25²); KDA's A_log (zero: a = 1) to N(0, 0.5²);
//   RESULTS  logits [B*T, V] (forward_logits), loss (the mean over the counted targets, from a
//            training forward_backward with grad_scale 1/count) and grad.<name> for every
//            parameter.
// BATCH holds tokens and targets [B, T] as float32.
#include <string>

#include "driver.h"
#include "k3/base/philox.h"

namespace {

// How a parameter is moved away from its initial value: N(mean, std²) per element.
struct Perturbation {
  float mean, std;
};

// The perturbation of a parameter by name, or std 0 to keep it as initialized.
Perturbation perturbation(const std::string& name) {
  if (name.find("res_proj") != std::string::npos) return {0.f, 0.1f};
  if (k3::model::is_router_bias(name)) return {0.f, 0.01f};
  if (name.ends_with("norm.weight")) return {1.f, 0.25f};
  if (name.ends_with(".A_log")) return {0.f, 0.5f};
  return {0.f, 0.f};
}

void run(const std::string& config_path, uint64_t seed, const std::string& batch_path,
         const std::string& weights_path, const std::string& results_path) {
  k3::model::Model model(k3::model::load_model_config(config_path));
  model.initialize(seed);
  k3::model::ParamRegistry& params = model.params();
  int perturbed = 0;
  for (int i = 0; i < params.size(); ++i) {
    const Perturbation p = perturbation(params.info(i).name);
    if (p.std == 0.f) continue;
    k3::Tensor w = params.value(i);
    k3::fill_normal(w.f32(), w.numel(), seed + 1, static_cast<uint64_t>(i), 0, p.mean, p.std);
    ++perturbed;
  }
  K3_CHECK(perturbed > 0, config_path, ": no parameter to perturb");
  k3::reference::save_weights(params, weights_path);

  const k3::reference::Batch b = k3::reference::load_batch(batch_path);
  k3::Arena arena(size_t{1} << 30, false);
  k3::activation::ActivationManager acts;
  k3::Safetensors out;
  k3::reference::add_model_outputs(model, arena, acts, b, batch_path, out);
  k3::save_safetensors(results_path, out);
}

}  // namespace

int main(int argc, char** argv) { return k3::reference::model_driver_main(argc, argv, run); }
