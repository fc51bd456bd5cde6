// Driver for k3_model.py: builds the K3 model of a config (KDA, gated MLA, LatentMoE, Attention
// Residuals) from a seed and writes
//   WEIGHTS  its weights (K3 names), which the PyTorch side loads. The AttnRes pseudo-queries
//            (*res_proj*) start at zero, a uniform mix; they are set to N(0, 0.1²) here so that the
//            mixing weights differ between rows, and the router biases to N(0, 0.01²) so that the
//            biased selection differs from the unbiased one;
//   RESULTS  logits [B*T, V] (forward_logits), loss (the mean over the counted targets, from a
//            training forward_backward with grad_scale 1/count) and grad.<name> for every parameter.
// BATCH holds tokens and targets [B, T] as float32.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/model/model.h"
#include "k3/tensor/safetensors.h"

namespace {

constexpr float kResProjStd = 0.1f;
constexpr float kRouterBiasStd = 0.01f;

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
  k3::Safetensors weights;
  for (int i = 0; i < params.size(); ++i) weights.tensors.emplace_back(params.info(i).name, params.value(i));
  k3::save_safetensors(weights_path, weights);

  const k3::Safetensors batch = k3::load_safetensors(batch_path);
  const k3::Tensor* tokens = batch.find("tokens");
  const k3::Tensor* targets = batch.find("targets");
  K3_CHECK(tokens && targets && tokens->ndim() == 2 && tokens->shape() == targets->shape(),
           batch_path, ": needs tokens and targets of one shape [B, T]");
  const std::vector<int32_t> tok = as_ids(*tokens), tgt = as_ids(*targets);
  const k3::TokenBatch b{tok.data(), tgt.data(), tokens->dim(0), tokens->dim(1)};
  const int64_t V = model.config().vocab_size;

  k3::Arena arena(size_t{1} << 30, false);
  k3::ActivationManager acts;
  k3::Safetensors out;
  k3::Tensor logits = k3::Tensor::empty({b.B * b.T, V});
  model.forward_logits(arena, b.tokens, b.B, b.T, logits.f32());
  out.tensors.emplace_back("logits", logits);

  int64_t count = 0;
  for (int32_t t : tgt) count += t != model.config().ignore_index;
  K3_CHECK(count > 0, batch_path, ": every target is ignored");
  const float scale = 1.0f / static_cast<float>(count);
  params.zero_grads();
  k3::Tensor loss = k3::Tensor::empty({1});
  loss.f32()[0] = static_cast<float>(model.forward_backward(arena, acts, b, scale).sum * scale);
  out.tensors.emplace_back("loss", loss);
  for (int i = 0; i < params.size(); ++i)
    out.tensors.emplace_back("grad." + params.info(i).name, copy_of(params.grad(i)));
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
