// K3's one-at-a-time ablations at test size: k3-nano (configs/k3-nano.json) with one component
// swapped for its K2-style counterpart, the file's JSON edited as a study's config would be and
// read through the same parser (so its validation runs too). Shared by the model tests (gradients
// against finite differences, tensor-parallel layouts) and the expert-parallel layouts.
//
// The sixth swap, Per-Head Muon → Muon (train.muon_per_head = false), is the optimizer's and has
// no model config: tests/optim/param_groups_test.cpp and the tensor-parallel layouts
// (tests/parallel/tensor_parallel_test.cpp) cover it.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/model/config.h"

namespace k3::testing {

struct Ablation {
  const char* name;  // a gtest-friendly name
  const char* what;  // the swap
  void (*edit)(nlohmann::json&);
  // The model-config fields it changes (a name ending in '.': every field of that object).
  std::vector<std::string> fields;
};

// gtest prints a parameter by its name.
inline void PrintTo(const Ablation& a, std::ostream* os) { *os << a.name; }

inline const std::vector<Ablation>& ablations() {
  static const std::vector<Ablation> all = {
      {"mla_only",
       "KDA -> MLA in every layer (no linear_attn_config)",
       [](nlohmann::json& j) { j.erase("linear_attn_config"); },
       {"linear_attn_config."}},
      {"plain_residuals",
       "Attention Residuals -> plain residuals",
       [](nlohmann::json& j) { j["attn_res_block_size"] = 0; },
       {"attn_res_block_size"}},
      {"standard_moe",
       "Stable LatentMoE -> standard MoE on x, Quantile Balancing kept",
       [](nlohmann::json& j) {
         j["moe_latent"] = false;
         j.erase("routed_expert_hidden_size");
       },
       {"moe_latent", "routed_expert_hidden_size"}},
      {"bias_balancer",
       "Quantile Balancing -> the bias balancer, LatentMoE kept",
       [](nlohmann::json& j) {
         j["moe_balancer"] = "bias";
         j["moe_bias_update_rate"] = 1e-3;
       },
       {"moe_balancer", "moe_bias_update_rate"}},
      {"swiglu",
       "SiTU-GLU -> SwiGLU",
       [](nlohmann::json& j) { j["hidden_act"] = "silu"; },
       {"hidden_act"}},
  };
  return all;
}

// k3-nano with the ablation `name` applied ("" or "k3" for k3-nano itself).
inline model::ModelConfig k3_nano_ablation(const std::string& name) {
  const std::string path = source_dir() + "/configs/k3-nano.json";
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  if (!name.empty() && name != "k3") {
    const Ablation* found = nullptr;
    for (const Ablation& a : ablations())
      if (name == a.name) found = &a;
    if (!found) throw std::invalid_argument("no ablation named " + name);
    found->edit(j);
  }
  return model::parse_model_config(j, path + " (" + (name.empty() ? "k3" : name) + ")");
}

}  // namespace k3::testing
