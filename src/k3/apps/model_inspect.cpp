// `k3lab model inspect CONFIG [--tensors] [--batch-size B --seq-len T]`: parameters per component,
// total and active, the memory training takes, and the full tensor list, without allocating any
// tensor.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/model/inventory.h"
#include "k3/optim/param_groups.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/train/preflight/preflight.h"

namespace k3::apps {

// Every tensor's optimizer (math §7 grouping): a tensor no rule covers is an error.
static void print_param_groups(const model::Model& m) {
  std::vector<optim::ParamSlot> slots;
  for (const model::TensorEntry& t : model::tensor_inventory(m))
    slots.push_back({t.name, t.shape, 0});
  std::printf("\n%-72s %s\n", "tensor", "optimizer");
  for (const optim::Assignment& a :
       optim::assign_param_groups(slots, parallel::head_sizes(m.config())))
    std::printf("%-72s %s\n", a.name.c_str(), a.describe().c_str());
}

void add_model(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Describe a model configuration");
  model->require_subcommand(1);
  struct Args {
    std::string config;
    bool tensors = false, optim = false;
    train::RunConfig run;  // its defaults: the K3 optimizer grouping, batch and sequence sizes
  };
  auto a = std::make_shared<Args>();
  auto* inspect =
      model->add_subcommand("inspect", "Parameter counts and tensor list of a model config");
  inspect->add_option("config", a->config, "Model configuration (HF-style JSON)")->required();
  inspect->add_flag("--tensors", a->tensors, "List every tensor: name, shape, dtype");
  inspect->add_flag("--optim", a->optim, "List every tensor's optimizer and block shape");
  inspect
      ->add_option("--batch-size", a->run.train.batch_size,
                   "Sequences per micro-batch, for the activations")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  inspect->add_option("--seq-len", a->run.data.seq_len, "Tokens per sequence, for the activations")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  inspect->callback([a] {
    model::Model m(model::load_model_config(a->config), /*allocate=*/false);
    const model::ModelConfig& c = m.config();
    std::printf("%s: %lld layers, hidden %lld, vocabulary %lld\n", a->config.c_str(),
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                static_cast<long long>(c.vocab_size));
    std::printf("%-22s %20s %20s\n", "component", "total", "active");
    for (const model::ComponentCount& cc : model::parameter_counts(m))
      std::printf("%-22s %20lld %20lld\n", cc.component.c_str(), static_cast<long long>(cc.total),
                  static_cast<long long>(cc.active));
    const train::RunMemory mem = train::estimate_run_memory(m, a->run, 0);
    std::printf(
        "\nmemory to train it (fp32; bytes per parameter: 4 value, 4 gradient, 8 AdamW / 4 Muon "
        "state):\n%s",
        train::describe(mem).c_str());
    if (a->optim) print_param_groups(m);
    if (!a->tensors) return;
    std::printf("\n%-72s %-18s %s\n", "tensor", "shape", "dtype");
    for (const model::TensorEntry& t : model::tensor_inventory(m))
      std::printf("%-72s %-18s %s\n", t.name.c_str(), shape_str(t.shape).c_str(),
                  t.release_dtype.c_str());
    if (c.num_experts > 0)
      std::printf(
          "\nrouted experts are listed in their logical shapes; the released checkpoint packs them "
          "as "
          "MXFP4 (weight_packed: two 4-bit values per byte, weight_scale: one E8M0 scale per 32 "
          "values)\n");
  });
}

}  // namespace k3::apps
