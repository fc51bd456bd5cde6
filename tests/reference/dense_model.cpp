// Driver for dense_model.py: builds the dense model of a config from a seed and writes
//   WEIGHTS  its initial weights (K3 names), which the PyTorch side loads;
//   RESULTS  logits, loss (mean), grad.<name> for every parameter, and train_losses: the losses
//            of 10 AdamW steps on the same batch.
// BATCH holds tokens and targets [B, T] as float32.
#include <string>

#include "driver.h"
#include "k3/optim/adamw.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/train/session.h"

namespace {

constexpr int kTrainSteps = 10;
constexpr float kLearningRate = 1e-2f;

void run(const std::string& config_path, uint64_t seed, const std::string& batch_path,
         const std::string& weights_path, const std::string& results_path) {
  k3::model::Model model(k3::model::load_model_config(config_path));
  model.initialize(seed);
  k3::model::ParamRegistry& params = model.params();
  k3::reference::save_weights(params, weights_path);

  const k3::reference::Batch b = k3::reference::load_batch(batch_path);
  k3::Arena arena = k3::train::step_arena();
  k3::activation::ActivationManager acts;
  k3::Safetensors out;
  const float scale = k3::reference::add_model_outputs(model, arena, acts, b, batch_path, out);

  k3::optim::AdamW opt(k3::parallel::param_set(params),
                       k3::optim::AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f});
  k3::Tensor losses = k3::Tensor::empty({kTrainSteps});
  for (int step = 0; step < kTrainSteps; ++step) {
    params.zero_grads();
    losses.f32()[step] =
        static_cast<float>(model.forward_backward(arena, acts, b.view, scale).sum * scale);
    opt.step(kLearningRate, 1.0f);
  }
  out.tensors.emplace_back("train_losses", losses);
  k3::save_safetensors(results_path, out);
}

}  // namespace

int main(int argc, char** argv) { return k3::reference::model_driver_main(argc, argv, run); }
