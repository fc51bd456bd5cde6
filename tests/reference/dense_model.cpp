// Driver for dense_model.py: builds the dense model of a config from a seed and writes
//   WEIGHTS  its initial weights (K3 names), which the PyTorch side loads;
//   RESULTS  logits, loss (mean), grad.<name> for every parameter, and train_losses: the losses
//            of 10 AdamW steps on the same batch.
// BATCH holds tokens and targets [B, T] as float32.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/model/model.h"
#include "k3/optim/adamw.h"
#include "k3/tensor/safetensors.h"
#include "k3/train/session.h"

namespace {

constexpr int kTrainSteps = 10;
constexpr float kLearningRate = 1e-2f;

std::vector<int32_t> as_ids(const k3::Tensor& t) {
  std::vector<int32_t> ids(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(t.f32()[i]);
  return ids;
}

k3::Tensor copy_of(const k3::Tensor& t) {
  k3::Tensor c = k3::Tensor::empty(t.shape());
  c.copy_from(t);
  return c;
}

void run(const std::string& config_path, uint64_t seed, const std::string& batch_path,
         const std::string& weights_path, const std::string& results_path) {
  k3::Model model(k3::load_model_config(config_path));
  model.initialize(seed);
  k3::ParamRegistry& params = model.params();
  k3::Safetensors weights;
  for (int i = 0; i < params.size(); ++i)
    weights.tensors.emplace_back(params.info(i).name, params.value(i));
  k3::save_safetensors(weights_path, weights);

  const k3::Safetensors batch = k3::load_safetensors(batch_path);
  const k3::Tensor* tokens = batch.find("tokens");
  const k3::Tensor* targets = batch.find("targets");
  K3_CHECK(tokens && targets && tokens->ndim() == 2 && tokens->shape() == targets->shape(),
           batch_path, ": needs tokens and targets of one shape [B, T]");
  const std::vector<int32_t> tok = as_ids(*tokens), tgt = as_ids(*targets);
  const k3::TokenBatch b{tok.data(), tgt.data(), tokens->dim(0), tokens->dim(1)};
  const int64_t V = model.config().vocab_size;

  k3::Arena arena = k3::train::step_arena();
  k3::ActivationManager acts;
  k3::Safetensors out;
  k3::Tensor logits = k3::Tensor::empty({b.B * b.T, V});
  model.forward_logits(arena, b.tokens, b.B, b.T, logits.f32());
  out.tensors.emplace_back("logits", logits);

  int64_t count = 0;
  for (int32_t t : tgt) count += t != model.config().ignore_index;
  K3_CHECK(count > 0, batch_path, ": every target is ignored");
  const float scale = 1.0f / static_cast<float>(count);
  k3::Tensor loss = k3::Tensor::empty({1});
  loss.f32()[0] = static_cast<float>(model.forward_backward(arena, acts, b, scale).sum * scale);
  out.tensors.emplace_back("loss", loss);
  for (int i = 0; i < params.size(); ++i)
    out.tensors.emplace_back("grad." + params.info(i).name, copy_of(params.grad(i)));

  k3::AdamW opt(k3::train::param_set(params), k3::AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f});
  k3::Tensor losses = k3::Tensor::empty({kTrainSteps});
  for (int step = 0; step < kTrainSteps; ++step) {
    params.zero_grads();
    losses.f32()[step] =
        static_cast<float>(model.forward_backward(arena, acts, b, scale).sum * scale);
    opt.step(kLearningRate, 1.0f);
  }
  out.tensors.emplace_back("train_losses", losses);
  k3::save_safetensors(results_path, out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s CONFIG SEED BATCH WEIGHTS_OUT RESULTS_OUT\n", argv[0]);
    return 2;
  }
  try {
    run(argv[1], std::stoull(argv[2]), argv[3], argv[4], argv[5]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
