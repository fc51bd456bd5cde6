// What a model is made of, without allocating it: every tensor (K3 name, global shape, the dtype
// the released checkpoint stores it in), parameter counts per component, total and active, and
// the training FLOPs a token costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/model/model.h"

namespace k3::model {

struct TensorEntry {
  std::string name;
  Shape shape;
  std::string release_dtype;  // "bf16", or "fp32" for the tensors K3 keeps in fp32
  std::string component;
};

// Components: embedding, lm_head, norms, the mixers (attention, mla, kda), attn_res, dense_mlp,
// moe.{router,latent,routed_experts,shared_experts}, and a multi-token prediction module's as
// "mtp." and its component in a layer, or mtp.eh_proj and mtp.lm_head; mtp.embedding and
// mtp.lm_head are the released checkpoint's copies of the model's.
struct ComponentCount {
  std::string component;
  int64_t total = 0;
  int64_t active = 0;  // per token: routed experts count k of E
};

// `model` may be constructed without allocation.
std::vector<TensorEntry> tensor_inventory(const Model& model);
std::vector<ComponentCount> parameter_counts(const Model& model);  // last entry: "total"

// The model's weight products as the planner's efficiency model reads them: its 2-D weights
// (the embedding tables, lookups, left out) by global shape [out, in], how many of each the model
// holds, whether they are routed experts (a token visits k of a layer's E), and the dimension
// tensor parallelism splits (0: out, column-parallel; 1: in, row-parallel; -1: replicated), and
// whether they are an LM head's (the model's or a multi-token prediction module's copy).
struct WeightProduct {
  int64_t out = 0, in = 0;
  int64_t count = 0;
  bool routed = false;
  int tp_dim = -1;
  bool head = false;
};
std::vector<WeightProduct> weight_products(const Model& model);

// Training FLOPs per token (math §10), forward and backward (twice the forward), at T tokens a
// sequence: Model::train_flops_per_token, defined in inventory.cpp as
//   6 · Model::matmul_params()  +  mixing_flops_per_token(config, T),
// 2 FLOPs a matrix parameter forward and 4 backward, for every 2-D weight but the embedding tables
// (lookups), the routed experts' counted for the k of E a token visits (so the LM head's, the
// router's, and a vision tower's as if every token passed through them; a multi-token prediction
// module's eh_proj, layer and head copy as if it ran for every token, as DeepSeek-V3's does).
//
// The sequence mixers' FLOPs per token beyond their weight products, summed over the layers (the
// multi-token prediction modules' included):
//   gated attention and gated MLA: causal softmax attention, a query meeting T/2 keys on average
//     in two products (q·k over d_qk, the weights times v over d_v): 3 · T · H · (d_qk + d_v)
//     (gated attention d_qk = d_v = head_dim; MLA d_qk = qk_nope + qk_rope, d_v = v_head_dim);
//   KDA: the recurrent count, the same at every T: the [K, V] state's rank-1 update and its
//     readout, 2 · K · V each per head, 3 · 4 · H · K · V (K = V = head_dim; the decay and the
//     delta rule's kᵀS are not counted).
// The planner's roofline takes the same mixing term.
double mixing_flops_per_token(const ModelConfig& config, int64_t T);

}  // namespace k3::model
