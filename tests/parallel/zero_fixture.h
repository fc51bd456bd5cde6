// Parameters for the ZeRO tests: a registry that only lays out the flat buffers (for the
// ShardLayout), heap buffers holding the values and gradients, and a plan mixing every kind of
// block: AdamW vectors and matrices, whole-matrix Muon (wide and tall), Per-Head Muon blocks, a
// stacked [E, m, n] expert tensor, and a frozen tensor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/dist/comm.h"
#include "k3/model/params.h"
#include "k3/optim/optimizer.h"
#include "k3/parallel/zero/shard_layout.h"

namespace k3::parallel::testing {

using optim::Assignment;
using optim::MuonGrouping;
using optim::OptimizerKind;

struct Tensors {
  struct Spec {
    std::string name;
    Shape shape;
    OptimizerKind kind;
    int64_t block_rows = 0;
    bool decay = true;
    int split = -1;  // the dimension split over tp (tests/parallel/tp_optimizer_test.cpp)
  };
  static std::vector<Spec> default_specs() {
    return {{"embed", {40, 12}, OptimizerKind::adamw, 0, false},
            {"norm", {12}, OptimizerKind::adamw, 0, false},
            {"q_proj", {24, 12}, OptimizerKind::muon, 6},          // Per-Head Muon: 4 heads
            {"o_proj", {12, 24}, OptimizerKind::muon, 0},          // whole, wide
            {"router_bias", {4}, OptimizerKind::frozen, 0, false},
            {"experts", {3, 10, 12}, OptimizerKind::muon, 10},     // per expert
            {"down", {30, 8}, OptimizerKind::muon, 0},             // whole, tall (transposed)
            {"kv_proj", {20, 12}, OptimizerKind::muon, 5},         // Per-Head Muon: 4 heads
            {"head_norm", {1, 12}, OptimizerKind::adamw, 0, false},
            {"lm_head", {40, 12}, OptimizerKind::adamw, 0, true}};
  }

  model::ParamRegistry registry;  // offsets and flat size only; never allocated
  std::vector<Spec> specs;
  std::vector<float> values, grads;

  explicit Tensors(std::vector<Spec> s = default_specs()) : specs(std::move(s)) {
    for (const Spec& t : specs) registry.add(t.name, t.shape, model::ParamInit::zeros());
    values = k3::testing::random_vec(registry.flat_size(), 7);
    grads.assign(registry.flat_size(), 0.0f);
  }
  Tensors(const Tensors&) = delete;

  optim::ParamSet set() {
    optim::ParamSet p{{}, values.data(), grads.data(), registry.flat_size()};
    for (int i = 0; i < registry.size(); ++i)
      p.slots.push_back({registry.info(i).name, registry.info(i).shape, registry.info(i).offset});
    return p;
  }
  std::vector<Assignment> plan() const {
    std::vector<Assignment> out;
    for (const Spec& t : specs) {
      Assignment a;
      a.name = t.name;
      a.shape = t.shape;
      a.optimizer = t.kind;
      a.block_rows = t.block_rows;
      a.grouping = t.block_rows ? MuonGrouping::per_head : MuonGrouping::whole;
      a.weight_decay = t.decay;
      out.push_back(a);
    }
    return out;
  }
  ShardLayout layout(int ranks, int rank, size_t bucket_floats) const {
    return ShardLayout(registry, ranks, rank, bucket_floats);
  }

  // The reduced gradient of `step`, the same on every rank.
  static std::vector<float> gradient(size_t n, int step) {
    return k3::testing::random_vec(n, 1000 + static_cast<uint64_t>(step));
  }
  // Puts it in the buffer: whole (ZeRO 0, 1), or only in `layout`'s own pieces with the rest
  // poisoned (ZeRO 2), so an optimizer that reads a stale element yields NaN.
  void set_gradient(int step, const ShardLayout* pieces_only = nullptr) {
    const std::vector<float> g = gradient(grads.size(), step);
    if (!pieces_only) {  // in place: the optimizers hold pointers into the buffers
      std::copy(g.begin(), g.end(), grads.begin());
      return;
    }
    std::fill(grads.begin(), grads.end(), std::numeric_limits<float>::quiet_NaN());
    for (FlatRange r : pieces_only->owned())
      std::copy(g.begin() + static_cast<int64_t>(r.begin), g.begin() + static_cast<int64_t>(r.end),
                grads.begin() + static_cast<int64_t>(r.begin));
  }
  // Values of the tensors one optimizer updates (padding excluded).
  std::vector<float> values_of(OptimizerKind kind) const {
    std::vector<float> out;
    for (int i = 0; i < registry.size(); ++i)
      if (specs[static_cast<size_t>(i)].kind == kind) {
        const auto* v = values.data() + registry.info(i).offset;
        out.insert(out.end(), v, v + registry.info(i).numel());
      }
    return out;
  }
};

constexpr float kLr = 0.02f, kGradScale = 0.8f;

// Steps `count` times from step `first` on; `step_one(s)` sets the gradient and steps.
template <typename F>
void run_steps(int first, int count, F step_one) {
  for (int s = first; s < first + count; ++s) step_one(s);
}

// A one-process optim::Optimizer over its own copy of the parameters, as the reference.
struct Reference {
  Tensors t;
  optim::Optimizer opt;
  explicit Reference(std::vector<Tensors::Spec> specs = Tensors::default_specs())
      : t(std::move(specs)), opt(t.set(), t.plan(), optim::OptimizerConfig{}) {}
  void steps(int first, int count) {
    run_steps(first, count, [&](int s) {
      t.set_gradient(s);
      opt.step(kLr, kGradScale);
    });
  }
};

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace k3::parallel::testing
