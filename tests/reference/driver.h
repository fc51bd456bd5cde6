// What the reference drivers share: the command-line frame (argument count, a usage line, errors
// as one line), and for the model drivers the batch file, the weights moved off their identity
// values and saved, and the outputs PyTorch is compared on (logits, mean loss, every parameter's
// gradient).
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/model/model.h"
#include "k3/tensor/safetensors.h"

namespace k3::reference {

// Runs run(args) when exactly `count` arguments are given (else prints the usage, exit status 2);
// an exception becomes "error: ..." on stderr and exit status 1.
inline int driver_main(int argc, char** argv, int count, const char* usage,
                       const std::function<void(const std::vector<std::string>&)>& run) {
  if (argc != count + 1) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    return 2;
  }
  try {
    run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// The model drivers' command line: CONFIG SEED BATCH WEIGHTS_OUT RESULTS_OUT.
using ModelRun = void (*)(const std::string& config_path, uint64_t seed,
                          const std::string& batch_path, const std::string& weights_path,
                          const std::string& results_path);
inline int model_driver_main(int argc, char** argv, ModelRun run) {
  return driver_main(argc, argv, 5, "CONFIG SEED BATCH WEIGHTS_OUT RESULTS_OUT",
                     [run](const std::vector<std::string>& a) {
                       run(a[0], std::stoull(a[1]), a[2], a[3], a[4]);
                     });
}

inline Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape());
  c.copy_from(t);
  return c;
}

// Moves the parameters that start at an identity value, behind which a dropped term would hide,
// away from it: the AttnRes pseudo-queries (*res_proj*, zero: a uniform mix) to N(0, 0.1²) so that
// the mixing weights differ between rows; the router biases (zero) to N(0, 0.01²) so that the
// biased selection differs from the unbiased one; every norm weight (*norm.weight: the RMSNorms,
// KDA's output norm, MLA's q/kv norms, the latent expert norm, the AttnRes key norms; one) to
// N(1, 0.25²); KDA's A_log (zero: a = 1) to N(0, 0.5²). Draws from seed + 1; `source` names the
// config in the error when nothing moved.
inline void move_off_identity(model::ParamRegistry& params, uint64_t seed,
                              const std::string& source) {
  struct Normal {
    float mean, std;  // std 0: kept as initialized
  };
  auto normal_of = [](const std::string& name) -> Normal {
    if (name.find("res_proj") != std::string::npos) return {0.f, 0.1f};
    if (model::is_router_bias(name)) return {0.f, 0.01f};
    if (name.ends_with("norm.weight")) return {1.f, 0.25f};
    if (name.ends_with(".A_log")) return {0.f, 0.5f};
    return {0.f, 0.f};
  };
  int moved = 0;
  for (int i = 0; i < params.size(); ++i) {
    const Normal n = normal_of(params.info(i).name);
    if (n.std == 0.f) continue;
    Tensor w = params.value(i);
    fill_normal(w.f32(), w.numel(), seed + 1, static_cast<uint64_t>(i), 0, n.mean, n.std);
    ++moved;
  }
  K3_CHECK(moved > 0, source, ": no parameter to move off its initial value");
}

inline void save_weights(const model::ParamRegistry& params, const std::string& path) {
  Safetensors weights;
  for (int i = 0; i < params.size(); ++i)
    weights.tensors.emplace_back(params.info(i).name, params.value(i));
  save_safetensors(path, weights);
}

// A batch file's `tokens` and `targets` [B, T] (ids stored as floats).
struct Batch {
  std::vector<int32_t> tokens, targets;
  model::TokenBatch view;
};

inline Batch load_batch(const std::string& path) {
  const Safetensors file = load_safetensors(path);
  const Tensor* tokens = file.find("tokens");
  const Tensor* targets = file.find("targets");
  K3_CHECK(tokens && targets && tokens->ndim() == 2 && tokens->shape() == targets->shape(), path,
           ": needs tokens and targets of one shape [B, T]");
  Batch b;
  for (const auto& [t, ids] : {std::pair{tokens, &b.tokens}, std::pair{targets, &b.targets}})
    for (int64_t i = 0; i < t->numel(); ++i) ids->push_back(static_cast<int32_t>(t->f32()[i]));
  b.view = {b.tokens.data(), b.targets.data(), tokens->dim(0), tokens->dim(1)};
  return b;
}

// Adds `logits`, `loss` (the mean over targets that are not ignored) and `grad.<name>` of every
// parameter to out (gradients zeroed first). Returns the scale 1 / (counted targets).
inline float add_model_outputs(model::Model& model, Arena& arena,
                               activation::ActivationManager& acts, const Batch& b,
                               const std::string& batch_path, Safetensors& out) {
  const model::TokenBatch& v = b.view;
  Tensor logits = Tensor::empty({v.B * v.T, model.config().vocab_size});
  model.forward_logits(arena, v.tokens, v.B, v.T, logits.f32());
  out.tensors.emplace_back("logits", logits);

  int64_t count = 0;
  for (int32_t t : b.targets) count += t != model.config().ignore_index;
  K3_CHECK(count > 0, batch_path, ": every target is ignored");
  const float scale = 1.0f / static_cast<float>(count);
  model::ParamRegistry& params = model.params();
  params.zero_grads();
  Tensor loss = Tensor::empty({1});
  loss.f32()[0] = static_cast<float>(model.forward_backward(arena, acts, v, scale).sum * scale);
  out.tensors.emplace_back("loss", loss);
  for (int i = 0; i < params.size(); ++i)
    out.tensors.emplace_back("grad." + params.info(i).name, copy_of(params.grad(i)));
  return scale;
}

}  // namespace k3::reference
