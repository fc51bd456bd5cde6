// The routed experts of one LatentMoE layer: each a SiTU-GLU in the latent space,
//   y = W2 SiTU(W1 z, W3 z),  W1, W3 [F, L], W2 [L, F],
// run on the (token, chosen expert) rows of a micro-batch, sorted by expert.
//
// In one process every expert runs here, one GEMM per weight over its contiguous rows. Under
// expert parallelism (the Step's ep group of P ranks) expert e lives on rank e / (E/P) only; the
// rows travel there and back by all-to-all (experts/exchange.h):
//   baseline  a count exchange tells each rank how many rows of its experts each peer routed,
//             then the rows go to their experts' home ranks; a hot expert overloads its home;
//   MoonEP    (ParallelDims::moonep) one all-gather of every rank's per-expert loads, a plan
//             every rank computes alike (experts/moonep_plan.h), and every rank computes exactly
//             S·K rows: replicas of hot experts, their weights sent by the home rank before the
//             compute, take the excess; their gradients go back to the home rank and are added
//             there in a fixed order.
// Both give the single-process result up to summation order. Under tensor parallelism each
// expert's F is split over tp (w1, w3 column-parallel, w2 row-parallel): y is this rank's partial
// sum, and the ep group holds the ranks of one tp coordinate.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "k3/kernels/glu.h"
#include "k3/kernels/moe_permute.h"
#include "k3/model/config.h"
#include "k3/model/experts/exchange.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/mlp.h"

namespace k3::model {

// The rows of a routing ids [tokens, k] (expert ids as floats) sorted by expert, its arrays in
// the arena.
kernels::MoePermutePlan plan_rows(Arena& arena, const float* ids, int64_t tokens, int64_t k,
                                  int64_t experts);

// One MoE layer's dispatch over the steps of a global batch, on this rank.
struct DispatchTotals {
  int64_t computed_rows = 0;  // rows this rank's expert GEMMs ran on
  int64_t home_rows = 0;      // rows routed to its home experts (what baseline would compute)
  int64_t replicas = 0;       // replica slots used
  int64_t overflow = 0;       // the largest overflow of a MoonEP plan (rows above S·K)
  int64_t bytes = 0;          // sent over ep: rows, replica weights and gradients, counts
  std::vector<int64_t> plan_loads;  // MoonEP: per micro-batch, the loads its plan was made from
};

// The same, gathered over the ep group at the end of a global batch.
struct DispatchStats {
  std::vector<int64_t> rows;       // per ep rank: rows computed
  std::vector<int64_t> home_rows;  // per ep rank: rows routed to its home experts
  int64_t replicas = 0;            // replica slots used, over ranks and micro-batches
  int64_t overflow = 0;            // the largest MoonEP plan overflow (0: always balanced)
  int64_t bytes = 0;               // sent over ep, over ranks
  // MoonEP: per micro-batch, each expert's rows over the ep group (what every rank made the
  // micro-batch's plan from), experts × micro-batches; empty under the baseline dispatch.
  std::vector<int64_t> plan_loads;
};

class RoutedExperts {
 public:
  RoutedExperts() = default;
  // Registers experts.{e}.w1 / w3 / w2 under `prefix` for every e (held by e's home ep rank).
  RoutedExperts(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c);

  // z [tokens, L], the latent of this rank's tokens; ids [tokens, k] their chosen experts (global
  // ids, as the floats the layer saves). Writes y [tokens·k, L] in plan_rows' row order. Saves
  // what backward needs (so it must not run inside an arena scope) and, when s.training, counts
  // the dispatch in its totals.
  void forward(const Step& s, const float* ids, int64_t tokens, const float* z, float* y) const;
  // dy [rows, L] in the plan's row order; writes dz [tokens, L]; weight gradients accumulate
  // (replicas' at their home rank).
  void backward(const Step& s, const kernels::MoePermutePlan& plan, const float* dy,
                float* dz) const;

  int64_t width() const { return width_; }  // this rank's slice of F
  // This layer's dispatch since the last call, every ep rank's (collective over ep); restarts
  // the counts.
  DispatchStats take_stats(const dist::Comm& ep) const;

 private:
  struct Weights {  // one compute slot's weights and their gradients (null in forward-only use)
    const float *w1, *w3, *w2;
    float *g1, *g3, *g2;
  };
  int64_t weight_floats() const { return 3 * width_ * latent_; }
  MoonEpShape shape(const Step& s, int64_t rows) const;
  // This micro-batch's exchange from the loads table [P × E] (see make_exchange).
  ExpertExchange exchange(const Step& s, const std::vector<int64_t>& loads, int64_t rows) const;
  // The loads table: this rank's row from the plan, the rest by the count exchange (baseline)
  // or the all-gather (MoonEP).
  std::vector<int64_t> share_loads(const Step& s, const kernels::MoePermutePlan& plan) const;
  // One process: every expert a home slot, on the plan's rows.
  ExpertExchange everything_here() const;
  // Slot k's weights: a home expert's from the registry, a replica's from `replicas`.
  Weights slot_weights(const Step& s, const ExpertExchange& x, int k, const float* replicas,
                       float* replica_grads) const;
  void compute(const Step& s, const ExpertExchange& x, const int64_t* first, const float* zc,
               const float* replicas, float* g, float* u, float* y) const;
  void compute_backward(const Step& s, const ExpertExchange& x, const int64_t* first,
                        const float* zc, const float* g, const float* u, const float* dy,
                        const float* replicas, float* replica_grads, float* dz) const;
  // Home -> host replica weights (forward) and host -> home replica gradients (backward).
  void send_replica_weights(const Step& s, const ExpertExchange& x, float* replicas) const;
  void return_replica_grads(const Step& s, const ExpertExchange& x,
                            const float* replica_grads) const;
  // Rows of width w: sorted order -> compute order on the hosts (dispatch), or back (combine).
  void dispatch(const Step& s, const ExpertExchange& x, const float* sorted, float* computed,
                int64_t w) const;
  void combine(const Step& s, const ExpertExchange& x, const float* computed, float* sorted,
               int64_t w) const;

  std::string prefix_;
  int64_t experts_ = 0, latent_ = 0, width_ = 0, k_ = 0;
  kernels::GluParams act_;
  std::vector<std::array<Linear, 3>> weights_;  // per expert: w1, w3, w2
  mutable DispatchTotals totals_;
};

}  // namespace k3::model
