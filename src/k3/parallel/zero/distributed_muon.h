// Muon under ZeRO 1 and 2 (math §7, optim/muon.h). Newton–Schulz needs a whole block (a
// matrix, a head's rows, an expert), while ZeRO cuts the flat buffers into per-rank pieces that
// ignore block bounds. So each block has one owner rank, chosen to balance the Newton–Schulz work
// (largest blocks first, each onto the least loaded rank); only the owner keeps its momentum. A
// step, with every message a non-blocking point-to-point one posted before any wait:
//   1. ZeRO 2: each rank sends the owner its pieces of the block's reduced gradient; the owner
//      receives them into the stale parts of its own gradient buffer, so assembling a block
//      takes no extra memory. (ZeRO 1: the owner holds the whole reduced gradient already.)
//   2. The owner runs M ← μM + G, V = G + μM, X = NewtonSchulz(V) on its blocks, batched by
//      shape (the same optim::MuonOrthogonalizer one process uses), and updates the whole block,
//      W ← W − lr (0.2·√max(r, c)·X + λW): every rank holds all of W between steps, and the
//      update is elementwise, so this is what each rank would compute for its own pieces.
//   3. The owner sends each rank exactly the slice of the updated block that covers that rank's
//      pieces, received straight into the rank's value buffer.
// The caller all-gathers the parameters afterwards. Buffers: X of one batch and the
// Newton–Schulz workspace; nothing grows with the model beyond one batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/optim/muon.h"
#include "k3/parallel/zero/shard_layout.h"

namespace k3::parallel {

// Owner rank of each block: greedy, largest Newton–Schulz cost first, onto the least loaded
// rank (ties: the earlier block, the lower rank). Deterministic, so every rank agrees.
std::vector<int> assign_block_owners(std::span<const optim::MuonBlock> blocks, int ranks,
                                     int ns_steps);

// Bytes `rank` sends plus receives in one step, analytically: for every piece of a block held by
// a rank other than its owner, the updated slice back (both ends count it) and under ZeRO 2 the
// gradient piece to the owner.
int64_t muon_p2p_bytes(const ShardLayout& layout, std::span<const optim::MuonBlock> blocks,
                       std::span<const int> owners, int zero_stage, int rank);

// A rank's Muon communication and memory. Working buffers: X of one batch, and the Newton–Schulz
// workspace (the batch's inputs, four m×m matrices per block of it), which any approach needs.
// Gathering every whole gradient matrix on every rank instead would take all_gather_bytes (every
// Muon element) besides the workspace.
struct MuonTraffic {
  int64_t p2p_bytes = 0;         // sent plus received by this rank in the last step
  int64_t x_buffer_bytes = 0;    // X of the largest batch
  int64_t workspace_bytes = 0;   // Newton–Schulz workspace at its peak
  int64_t all_gather_bytes = 0;  // the gather buffer of the all-gather approach
};

class DistributedMuon {
 public:
  // zero_stage 1 or 2; `dp` is the data-parallel group the layout cuts for.
  DistributedMuon(optim::ParamSet params, const std::vector<int64_t>& block_rows,
                  optim::MuonConfig config, const ShardLayout& layout, dist::Comm dp,
                  int zero_stage);

  // start() posts every receive and the gradient sends; finish() orthogonalizes and updates
  // this rank's blocks and sends the other ranks their slices. Other work may run in between.
  void start();
  void finish(float lr, float grad_scale);

  // The blocks in the order they are processed (grouped by shape) and their owners.
  const std::vector<optim::MuonBlock>& blocks() const { return blocks_; }
  const std::vector<int>& owners() const { return owners_; }
  // Block b's momentum when this rank owns it, else null.
  float* momentum(size_t b) const;
  int64_t state_floats() const { return momentum_.numel(); }
  const MuonTraffic& traffic() const { return traffic_; }
  int64_t expected_p2p_bytes() const;

 private:
  struct Piece {
    int rank;
    FlatRange range;
  };

  optim::ParamSet params_;
  optim::MuonConfig config_;
  ShardLayout layout_;
  dist::Comm dp_;
  int zero_stage_;
  std::vector<optim::MuonBlock> blocks_;
  std::vector<int> owners_;
  std::vector<std::vector<Piece>> pieces_;  // per block, in flat order
  std::vector<int64_t> momentum_at_;        // per block: offset into momentum_, or -1
  Tensor momentum_;                         // of the blocks this rank owns
  optim::MuonOrthogonalizer orthogonalizer_;
  Tensor x_;                                // one batch's X
  std::vector<dist::Request> gradient_requests_, value_requests_;
  int64_t bytes_before_ = 0;
  MuonTraffic traffic_;
};

}  // namespace k3::parallel
