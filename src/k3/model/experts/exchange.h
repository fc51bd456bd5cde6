// Where the rows of one MoE layer go under expert parallelism, and back.
//
// Each rank of the ep group routes its own tokens; a (token, chosen expert) pair is a *row* of
// the latent width L. The rows leave their rank sorted by expert (kernels/moe_permute.h). Expert
// e's rows over the whole group are numbered source rank by source rank, each source's in its
// own sorted order; its hosts (the home rank, then any replicas a MoonEP plan gave it) take
// consecutive runs of those numbers. So one table of loads, rows per (source rank, expert), and
// the hosts of each expert say where every row goes, and every rank derives the same answer.
//
//   send order     rows by destination rank, each destination's by expert (what all-to-all sends)
//   receive order  rows by source rank, each source's by expert (what all-to-all delivers)
//   compute order  rows by slot (this rank's home experts, then its replicas, by expert), each
//                  slot's by source rank: one contiguous block per expert for its GEMMs
//
// Block copies move rows between those orders; the combine and the backward run them in reverse.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/model/experts/moonep_plan.h"

namespace k3::model {

// `rows` consecutive rows from row `from` of one buffer to row `to` of another.
struct RowBlock {
  int64_t from = 0, to = 0, rows = 0;
};

// Copies each block's rows (`width` floats each) from src to dst; back = true copies dst's
// places to src's (the inverse movement).
void copy_row_blocks(std::span<const RowBlock> blocks, const float* src, float* dst, int64_t width,
                     bool back = false);

struct ExpertExchange {
  int ranks = 1, rank = 0;
  std::vector<int64_t> send_rows, recv_rows;  // per peer
  std::vector<RowBlock> pack;                 // sorted rows -> send order
  std::vector<RowBlock> unpack;               // receive order -> compute order
  std::vector<int> slot_expert;               // per compute slot: its (global) expert
  std::vector<int64_t> slot_first;            // per slot, then the total: its first row
  int home_slots = 0;                         // slots [0, home_slots) are home experts
  // Replica weights: per peer, the experts this rank sends it (its home experts the peer hosts)
  // and the experts it receives from it (the peer's experts this rank hosts), by expert.
  std::vector<std::vector<int>> weights_to, weights_from;
  int64_t home_rows = 0;  // rows of this rank's home experts over the group (all of them at home)

  int64_t computed_rows() const { return slot_first.back(); }
  int slots() const { return static_cast<int>(slot_expert.size()); }
  int64_t sent_rows() const;
  int64_t replica_sends() const;  // experts' weights this rank sends
};

// The exchange of rank `rank` for loads [ranks × experts] (loads[s·experts + e]: rows rank s
// routed to expert e). plan null: baseline expert parallelism, every row to its expert's home;
// then only this rank's row of `loads` and the columns of its home experts are read. Otherwise
// the MoonEP plan made from the column sums of `loads` under `shape`.
ExpertExchange make_exchange(const MoonEpShape& shape, std::span<const int64_t> loads,
                             const MoonEpPlan* plan, int rank);

}  // namespace k3::model
