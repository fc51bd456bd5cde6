// The process grid: the world's ranks arranged along five named dimensions, and one group per
// dimension (the ranks that differ only along it).
//
//   tp  tensor parallel     a layer's matrices split across ranks; talks inside every layer
//   cp  context parallel    a sequence's tokens split across ranks; talks inside every layer
//   ep  expert parallel     routed experts split across ranks; an all-to-all per MoE layer
//   dp  data parallel       the batch split across ranks; one gradient reduction per step
//   pp  pipeline parallel   the layers split across ranks; point-to-point between stages
//
// Rank order: tp varies fastest, then cp, ep, dp, and pp slowest,
//   rank = tp_i + tp·(cp_i + cp·(ep_i + ep·(dp_i + dp·pp_i))),
// so the groups that talk most often and on the critical path (tp, then cp) hold consecutive
// ranks, which launchers place on the same node, and the groups that talk least (dp, whose
// reduction hides behind the backward, and pp, with small point-to-point messages) span nodes.
//
// Dense (non-expert) parameters are replicated over cp × ep × dp: the `replica` group, over which
// their gradients are reduced. `tp_dp` holds the ranks that differ only in tp and dp (ordered tp
// fastest: rank tp_i + tp·dp_i): the optimizer's group, whose ranks together hold every shard of
// every ZeRO piece. A world of one has every group of size 1.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "k3/dist/comm.h"

namespace k3::dist {

struct ParallelDims {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  // Under tensor parallelism, split the residual stream's tokens over tp outside the layers'
  // tensor-parallel regions (norms, residual sums and Attention Residuals on a slice each).
  bool sequence_parallel = false;
  // Under expert parallelism: MoonEP's balanced dispatch with this many replica slots per rank
  // (model/experts/), instead of sending every row to its expert's home rank.
  bool moonep = false;
  int moonep_slots = 2;
  int64_t product() const { return int64_t{tp} * cp * ep * dp * pp; }
  std::string str() const;  // "dp2 × tp2 (sequence parallel)", "single process" when all are 1
  bool operator==(const ParallelDims&) const = default;
};

// This rank's coordinate along each dimension.
struct GridCoord {
  int tp = 0, cp = 0, ep = 0, dp = 0, pp = 0;
};

// Where each dimension's index sits in the rank (the order above), and back.
int rank_of(const ParallelDims& d, const GridCoord& c);
GridCoord coord_of(const ParallelDims& d, int rank);

class ProcessGrid {
 public:
  // Collective over `world`; refuses dims whose product is not world.size() (one line naming both).
  ProcessGrid(const ParallelDims& dims, const Comm& world);
  // A world of one.
  ProcessGrid() : ProcessGrid(ParallelDims{}, Comm()) {}

  const ParallelDims& dims() const { return dims_; }
  const GridCoord& coord() const { return coord_; }
  const Comm& world() const { return world_; }
  const Comm& tp() const { return tp_; }
  const Comm& cp() const { return cp_; }
  const Comm& ep() const { return ep_; }
  const Comm& dp() const { return dp_; }
  const Comm& pp() const { return pp_; }
  const Comm& replica() const { return replica_; }
  const Comm& tp_dp() const { return tp_dp_; }
  // Every group, for counters: world, tp, cp, ep, dp, pp, replica, tp_dp.
  std::array<const Comm*, 8> groups() const;

 private:
  ParallelDims dims_;
  GridCoord coord_;
  Comm world_, tp_, cp_, ep_, dp_, pp_, replica_, tp_dp_;
};

// The grid of a plain single-process run (every group of size 1): what a model or layer uses
// when it is given no other.
const ProcessGrid& single_process();

}  // namespace k3::dist
