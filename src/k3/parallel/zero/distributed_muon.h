// Muon over ranks that each hold part of the parameters (math §7, optim/muon.h): ZeRO pieces
// over dp, tensor-parallel shards over tp, or both. Newton–Schulz needs a whole global block (a
// matrix, a head's rows, an expert), exactly as one process holds it, while the ranks hold
// pieces that ignore block bounds. So each block is a *unit* with one owner rank, chosen to
// balance the Newton–Schulz work; only the owner keeps its momentum, in the block's global
// layout. A block of a parameter replicated over tp is one unit per tp coordinate (each handles
// its own identical copy, without talking across tp); a block inside one tp rank's shard is a
// unit on that coordinate; a block spanning tp ranks is one unit made of their parts.
//
// Ranks are numbered in `group` as tp coordinate + tp · dp coordinate (the layout's rank). A
// step, every message a non-blocking point-to-point one posted before any wait:
//   1. Each rank sends each owner the pieces of its units' reduced gradient that the owner does
//      not hold itself (ZeRO 2: all but the owner's own pieces; ZeRO 0 and 1: those of other tp
//      coordinates). The owner assembles a unit inside its own tp coordinate in place, in its
//      gradient buffer (no extra memory); a unit spanning tp in a buffer sized at start-up.
//   2. The owner runs M ← μM + G, V = G + μM, X = NewtonSchulz(V) on its units, batched by
//      global shape (the same optim::MuonOrthogonalizer one process uses), and puts X where the
//      gradient was.
//   3. Every holder of a piece gets that piece of X (the owner keeps its own; the others
//      receive theirs into their gradient buffer, once their own gradient sends are done) and
//      applies W ← W − lr (0.2·√max(r, c)·X + λW) with the global block's shape: the update is
//      elementwise, so each piece steps exactly as inside the whole block.
// Under ZeRO 1 and 2 the caller all-gathers the parameters over dp afterwards. After a step the
// gradient buffer's Muon ranges hold X, not the gradient.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/optim/muon.h"
#include "k3/parallel/zero/shard_layout.h"

namespace k3::parallel {

// A contiguous range of a holder's flat buffers that belongs to one unit.
struct MuonPiece {
  int holder = 0;   // group rank: tp coordinate + tp · dp coordinate
  FlatRange range;  // floats, into the flat buffers (the same offsets on every tp coordinate)
  int64_t at = 0;   // its place in the unit's layout
};

// One Newton–Schulz block in global coordinates and where its elements live. Its layout is
// row-major, or, when the columns are split, the tp coordinates' column panels one after
// another (optim::MuonOrthogonalizer's panel layout), so that each tp coordinate's part is
// contiguous there as in its flat buffers: a panel, a range of rows, or (a split along a middle
// dimension) a few such ranges.
struct MuonUnit {
  size_t slot = 0;                     // index into the ParamSet's slots
  int64_t row0 = 0;                    // first global row, the parameter viewed as [rows, cols]
  int64_t rows = 0, cols = 0;          // the block's global shape
  int64_t panel_cols = 0;              // its layout: column panels this wide (cols: row-major)
  int tp_first = 0, tp_end = 1;        // tp coordinates [first, end) hold parts of it
  std::vector<MuonPiece> pieces = {};  // in the unit's layout order
  int64_t numel() const { return rows * cols; }
  bool spans_tp() const { return tp_end - tp_first > 1; }
};

// Every Newton–Schulz block of `params` (this rank's shards; block_rows per slot as
// optim::split_by_optimizer gives them) as units over `layout` and tp, in processing order: what a
// DistributedMuon on that layout runs, known without its group.
std::vector<MuonUnit> muon_units(const optim::ParamSet& params,
                                 const std::vector<int64_t>& block_rows, const ShardLayout& layout,
                                 int tp);

// Owner of each unit: greedy, largest Newton–Schulz cost first, onto the least loaded of the
// group ranks on the unit's tp coordinates (ties: the earlier unit, the lower rank).
// Deterministic, so every rank agrees. Each tp coordinate keeps its ranks in a heap by load, so
// a unit costs O(log dp) per tp coordinate it lies on, not a scan of all tp · dp ranks.
std::vector<int> assign_unit_owners(std::span<const MuonUnit> units, int tp, int dp, int ns_steps);

// Bytes `rank` sends plus receives in one step, analytically: for every piece held by a rank
// other than its unit's owner, its X (both ends count it) and, when the owner does not hold it,
// its gradient.
int64_t muon_p2p_bytes(std::span<const MuonUnit> units, std::span<const int> owners, int tp,
                       int zero_stage, int rank);

// The same count for group rank `rank` of the units muon_units(params, block_rows, layout, tp)
// makes and their owners from assign_unit_owners(units, tp, layout.ranks(), ns_steps), without
// listing every rank's pieces: the owners follow from the units' shapes alone, and the count
// needs only the parts of each unit and the rank's own share of them. Memory grows with the
// units, not with units × dp; what the planner uses for a layout of thousands of dp ranks.
int64_t muon_p2p_bytes(const optim::ParamSet& params, const std::vector<int64_t>& block_rows,
                       const ShardLayout& layout, int tp, int zero_stage, int ns_steps, int rank);

// A rank's Muon communication and memory. Working buffers: X of one batch, the buffer of the
// units spanning tp that it owns, and the Newton–Schulz workspace (the batch's inputs, four m×m
// matrices per block of it), which any approach needs. Gathering every whole gradient matrix on
// every rank instead would take all_gather_bytes (every global Muon element) besides it.
struct MuonTraffic {
  int64_t p2p_bytes = 0;          // sent plus received by this rank in the last step
  int64_t x_buffer_bytes = 0;     // X of the largest batch
  int64_t unit_buffer_bytes = 0;  // the owned units spanning tp
  int64_t workspace_bytes = 0;    // Newton–Schulz workspace at its peak
  int64_t all_gather_bytes = 0;   // the gather buffer of the all-gather approach
};

class DistributedMuon {
 public:
  // params: this rank's shards (optim::ParamSlot's split says where they lie); `layout` cuts
  // them over dp; `group` has tp · layout.ranks() ranks numbered as above: dp when tp = 1, tp_dp,
  // or tp with layout.alone() when nothing is sharded over dp. zero_stage 2: a rank holds the
  // reduced gradient of its own pieces only; 0 and 1: of its tp coordinate's whole buffer.
  DistributedMuon(optim::ParamSet params, const std::vector<int64_t>& block_rows,
                  optim::MuonConfig config, const ShardLayout& layout, dist::Comm group, int tp,
                  int zero_stage);

  // start() posts the gradient messages and assembles what is local; finish() orthogonalizes
  // this rank's units, hands out X and applies it. Other work may run in between.
  void start();
  void finish(float lr, float grad_scale);

  // The units in the order they are processed (grouped by shape) and their owners.
  const std::vector<MuonUnit>& units() const { return units_; }
  const std::vector<int>& owners() const { return owners_; }
  // Unit u's momentum ([rows, cols] row-major) when this rank owns it, else null.
  float* momentum(size_t u) const;
  int64_t state_floats() const { return momentum_.numel(); }
  const MuonTraffic& traffic() const { return traffic_; }
  int64_t expected_p2p_bytes() const;

 private:
  // Where the owner assembles unit u's gradient, then X, in the unit's layout.
  float* home(size_t u) const;
  // Every piece this rank holds of a unit it does not own, with the unit, in unit order.
  template <typename F>
  void for_each_held_piece(F f) const;

  optim::ParamSet params_;
  optim::MuonConfig config_;
  dist::Comm group_;
  int tp_, zero_stage_;
  std::vector<MuonUnit> units_;
  std::vector<int> owners_;
  std::vector<int64_t> momentum_at_, buffer_at_;  // per unit: offsets, or -1
  Tensor momentum_;                               // of the units this rank owns
  Tensor buffer_;                                 // of the owned units spanning tp
  optim::MuonOrthogonalizer orthogonalizer_;
  Tensor x_;  // one batch's X
  std::vector<dist::Request> gradient_requests_;
  int64_t bytes_before_ = 0;
  MuonTraffic traffic_;
};

}  // namespace k3::parallel
