// MoonEP's placement plan: given one MoE layer's routing (how many token-slots each expert got
// over the whole ep group), decide which ranks compute how many of each expert's rows so that
// every rank computes exactly S·K rows (S tokens per rank, top-K), whatever the routing.
//
// Expert e lives on its home rank e / (experts / ranks). Each rank also has `replica_slots`
// spare slots: it may host that many copies of other ranks' experts for this step. Ranks with
// room (fewer than S·K rows of their own) take replicas, the emptiest first; an over-full rank may
// give away more than its excess and then take replicas itself, so excess can travel from rank
// to rank (docs/expert_parallel.md has the rules and an example). The plan is a pure function of
// the loads and the shape: the same routing gives the same plan on every rank, so ranks agree on
// it without exchanging anything beyond the loads.
//
// The plan is greedy, not optimal. When the slots run out before every room is filled, the rows
// that found no slot stay on their home rank: the plan still places every row exactly once, and
// `overflow` counts the rows above S·K on the fullest rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace k3::model {

struct MoonEpShape {
  int ranks = 1;              // the ep group's size
  int experts = 1;            // routed experts, split evenly over the ranks
  int replica_slots = 0;      // R: replicas of other ranks' experts one rank may host
  int64_t rows_per_rank = 0;  // S·K
  int home_rank(int expert) const { return expert / (experts / ranks); }
};

// `rows` of expert `expert` computed on `rank`.
struct Placement {
  int rank = 0;
  int64_t rows = 0;
};

struct MoonEpPlan {
  // Per expert, its hosts in row order: the home rank first (possibly with 0 rows), then its
  // replicas. Expert e's rows, in the order the dispatch numbers them, go to hosts[e][0] first.
  std::vector<std::vector<Placement>> hosts;
  std::vector<int64_t> rows;  // per rank: rows computed
  std::vector<int> replicas;  // per rank: replica slots used
  int64_t overflow = 0;       // max over ranks of rows above S·K; 0 when balanced
  bool balanced() const { return overflow == 0; }
};

// Checks the shape and the loads (one per expert, non-negative, summing to ranks·S·K); a
// mismatch is an error naming it.
MoonEpPlan plan_moonep(const MoonEpShape& shape, std::span<const int64_t> load);

// The imbalance of a set of loads: max(load) / mean(load) − 1 (0 when even, or when all are 0).
double maxvio(std::span<const int64_t> load);

}  // namespace k3::model
