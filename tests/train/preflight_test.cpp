#include "k3/train/preflight/preflight.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/test_util.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/optim/optimizer.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

RunConfig micro_run(const std::string& optimizer) {
  RunConfig c;
  c.model.config = testing::source_dir() + "/configs/k3-micro.json";
  c.train.optimizer = optimizer;
  c.train.batch_size = 8;
  c.data.seq_len = 256;
  return c;
}

double state_bytes(const optim::Optimizer& opt) {
  double bytes = 0;
  for (const auto& [name, t] : opt.state_tensors()) bytes += static_cast<double>(t.nbytes());
  return bytes;
}

TEST(Preflight, OptimizerStateIsWhatTheOptimizerAllocates) {
  for (const char* optimizer : {"muon", "adamw"}) {
    const RunConfig c = micro_run(optimizer);
    model::Model m(model::load_model_config(c.model.config));
    const optim::ParamSet params = parallel::param_set(m.params());
    const optim::Optimizer opt(params, optimizer_plan(params.slots, m.config(), c.train), {});
    const RunMemory mem = estimate_run_memory(m, c, 1000);
    EXPECT_EQ(mem.optimizer_state, state_bytes(opt)) << optimizer;
    EXPECT_EQ(mem.adamw_values + mem.muon_values + mem.frozen_values, m.params().total_numel());
    EXPECT_EQ(mem.data, 4000.0);
  }
  // K3's grouping trains most values with Muon (one moment), AdamW with two.
  const model::Model described(model::load_model_config(micro_run("muon").model.config), false);
  EXPECT_LT(estimate_run_memory(described, micro_run("muon"), 0).optimizer_state,
            estimate_run_memory(described, micro_run("adamw"), 0).optimizer_state);
}

// Under tensor parallelism the estimate is one rank's: its shards of the parameters, their
// gradients and optimizer state, and the activations of its heads and columns (the residual
// stream whole on every rank, unless sequence parallelism splits its tokens too).
TEST(Preflight, UnderTensorParallelismTheEstimateIsOneRanksShard) {
  const model::ModelConfig mc = model::load_model_config(micro_run("muon").model.config);
  const model::Model whole(mc, false), shard(mc, {{"tp", {2, 0}}});
  RunConfig split = micro_run("muon");
  split.parallel.tp = 2;
  const RunMemory one = estimate_run_memory(whole, micro_run("muon"), 0);
  const RunMemory two = estimate_run_memory(shard, split, 0);
  EXPECT_EQ(two.model.parameter_bytes, static_cast<double>(shard.params().flat_size()) * 4);
  EXPECT_LT(two.model.parameter_bytes, 0.6 * one.model.parameter_bytes);
  EXPECT_LT(two.optimizer_state, 0.6 * one.optimizer_state);
  EXPECT_LT(two.model.activation_bytes, 0.75 * one.model.activation_bytes);
  EXPECT_GT(two.model.activation_bytes, 0.5 * one.model.activation_bytes);
  split.parallel.sequence_parallel = true;
  const RunMemory sp = estimate_run_memory(shard, split, 0);
  EXPECT_LT(sp.model.activation_bytes, two.model.activation_bytes);
  std::printf(
      "k3-micro per rank under tp2: parameters %.0f%%, optimizer state %.0f%%, activations %.0f%% "
      "(%.0f%% with sequence parallelism) of one process\n",
      100 * two.model.parameter_bytes / one.model.parameter_bytes,
      100 * two.optimizer_state / one.optimizer_state,
      100 * two.model.activation_bytes / one.model.activation_bytes,
      100 * sp.model.activation_bytes / one.model.activation_bytes);
}

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// The whole estimate against what one training step really adds to the process: the model, its
// gradients, the optimizer with its state and scratch, and the step arena's pages, all touched by
// a forward + backward and an optimizer step. Within a factor of 1.25 either way: the heap and the
// kernels' per-thread buffers are not in the estimate (for this model they measured 0.1% of it).
TEST(Preflight, EstimateMatchesTheResidentMemoryOfAStep) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine change what is resident";
#endif
  testing::ScopedThreads one(
      1);  // what is resident does not depend on it; a busy machine makes threads wait
  const RunConfig c = micro_run("muon");
  const double before = resident_bytes();
  model::Model m(model::load_model_config(c.model.config));
  m.initialize(3);
  const optim::ParamSet params = parallel::param_set(m.params());
  optim::Optimizer opt(params, optimizer_plan(params.slots, m.config(), c.train), {});
  Arena arena = step_arena();
  activation::ActivationManager acts;
  const int64_t n = c.train.batch_size * c.data.seq_len;
  const auto tokens = testing::random_tokens(static_cast<size_t>(n), 256, 1);
  const auto targets = testing::random_tokens(static_cast<size_t>(n), 256, 2);
  m.forward_backward(arena, acts,
                     {tokens.data(), targets.data(), c.train.batch_size, c.data.seq_len}, 1.0f);
  opt.step(1e-3f, 1.0f);
  const double grown = resident_bytes() - before;
  const double estimate = estimate_run_memory(m, c, 0).total();
  EXPECT_GT(estimate, grown / 1.25);
  EXPECT_LT(estimate, grown * 1.25);
}

TEST(Preflight, MemoryLimitIsTheSmallerOfTheSetOneAndTheMachines) {
  const MemoryLimit machine = memory_limit(0);
  EXPECT_GT(machine.bytes, 0);
  EXPECT_EQ(machine.source.find("run.memory_limit_gib"), std::string::npos);
  const MemoryLimit set = memory_limit(0.5);
  EXPECT_EQ(set.bytes, 0.5 * (1 << 30));
  EXPECT_EQ(set.source, "run.memory_limit_gib = 0.5");
  EXPECT_EQ(memory_limit(1e9).bytes, machine.bytes);  // more than the machine has: the machine's
}

}  // namespace
}  // namespace k3::train
