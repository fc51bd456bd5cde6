// Driver for k3_model.py: builds the K3 model of a config (KDA, gated MLA, LatentMoE, Attention
// Residuals) from a seed and writes
//   WEIGHTS  its weights (K3 names), which the PyTorch side loads, moved off their identity values
//            (driver.h, move_off_identity);
//   RESULTS  logits [B*T, V] (forward_logits), loss (the mean over the counted targets, from a
//            training forward_backward with grad_scale 1/count) and grad.<name> for every
//            parameter.
// BATCH holds tokens and targets [B, T] as float32.
#include <string>

#include "driver.h"

namespace {

void run(const std::string& config_path, uint64_t seed, const std::string& batch_path,
         const std::string& weights_path, const std::string& results_path) {
  k3::model::Model model(k3::model::load_model_config(config_path));
  model.initialize(seed);
  k3::reference::move_off_identity(model.params(), seed, config_path);
  k3::reference::save_weights(model.params(), weights_path);

  const k3::reference::Batch b = k3::reference::load_batch(batch_path);
  k3::Arena arena(size_t{1} << 30, false);
  k3::activation::ActivationManager acts;
  k3::Safetensors out;
  k3::reference::add_model_outputs(model, arena, acts, b, batch_path, out);
  k3::save_safetensors(results_path, out);
}

}  // namespace

int main(int argc, char** argv) { return k3::reference::model_driver_main(argc, argv, run); }
