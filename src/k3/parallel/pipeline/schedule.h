// Pipeline schedules as data (docs/pipeline_parallel.md): for each pipeline rank, the ordered list
// of nodes it runs in one optimizer step. One executor runs any list, so a new schedule is a new
// generator here, never new control flow.
//
// The model is cut into pp·vp virtual stages; rank r holds vp chunks, chunk c being virtual stage
// c·pp + r (the embedding is in stage 0, the head in the last). A micro-batch's forward visits the
// stages in order and its backward in reverse. The generators:
//   gpipe        every forward, then every backward (all micro-batches in flight at once);
//   1f1b         pp - r - 1 warmup forwards, then one forward and one backward in turn, then the
//                remaining backwards (at most pp - r micro-batches in flight on rank r);
//   interleaved  1F1B over vp chunks a rank, in Megatron-Core's order: micro-batches in groups of
//                `group` (default pp), each group through chunk 0, then chunk 1, ...; the last
//                group takes what is left when the count is not a multiple of the group;
//   zb           ZB-H1: 1F1B with each backward split into its input-gradient half (B) and its
//                weight-gradient half (W), the W's deferred into the bubbles.
// Filler nodes (the vision encoder's forward of a micro-batch, on rank 0) are placed in rank 0's
// idle time before the micro-batch's first forward needs them.
//
// Where several orders are valid, the generators decide by simulating the step with unit costs
// (simulate.h): a flexible node (W, filler) runs when its rank would otherwise wait.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::parallel::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zero_bubble };
ScheduleKind parse_schedule_kind(const std::string& name);  // gpipe, 1f1b, interleaved, zb
const char* schedule_kind_name(ScheduleKind kind);

enum class Op : uint8_t {
  forward,          // F: a chunk's forward of one micro-batch
  backward,         // B: its whole backward (input and weight gradients)
  backward_input,   // B of zero-bubble schedules: the input gradients only
  backward_weight,  // W: the weight gradients deferred from backward_input
  filler,           // work run in a bubble: the encoder's forward of micro-batch `micro`
  send_forward,     // this chunk's output activations to the next virtual stage
  recv_forward,     // posts the receive of this chunk's input from the previous stage
  send_backward,    // this chunk's input gradient to the previous virtual stage
  recv_backward,    // posts the receive of this chunk's output gradient from the next stage
};
bool is_compute(Op op);

struct Node {
  Op op;
  int micro = 0;
  int chunk = 0;  // the rank's chunk (0 for a filler)
  bool operator==(const Node&) const = default;
};
// "F3", "B3", "W3" (with ".c" for chunk c when vp > 1), "E3" for a filler, "sF3", "rF3", "sB3",
// "rB3" for communication.
std::string node_label(const Node& n, int vp);

// Relative costs for the unit simulation (a chunk's forward of one micro-batch is 1/vp of a whole
// stage's): forward 1, backward 2 (input 1 + weight 1), filler `filler`, communication free.
struct UnitCosts {
  double forward = 1, backward_input = 1, backward_weight = 1, filler = 1;
};

// Filler nodes (the vision encoder's forward, one per micro-batch, on rank 0): none, placed in
// the bubbles (each at the latest just before the forward that needs it), or all before rank
// 0's first forward (the encoder run ahead of the pipeline, for comparison).
enum class Fillers { none, in_bubbles, before };
const char* fillers_name(Fillers f);

struct ScheduleShape {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 1, vp = 1, microbatches = 1;
  int group = 0;                   // interleaved: micro-batches per group (0: pp)
  Fillers fillers = Fillers::none;
  UnitCosts costs;                 // for placing flexible nodes
};

// A node's unit cost under `shape` (zero for communication).
double node_cost(const ScheduleShape& shape, const Node& n);

struct Schedule {
  ScheduleShape shape;
  std::vector<std::vector<Node>> ranks;  // [pp] ordered nodes

  int stages() const { return shape.pp * shape.vp; }
  int stage(int rank, int chunk) const { return chunk * shape.pp + rank; }
  int rank_of(int stage) const { return stage % shape.pp; }
  int chunk_of(int stage) const { return stage / shape.pp; }
  bool split_backward() const { return shape.kind == ScheduleKind::zero_bubble; }
};

// Checks the shape (one line naming what is wrong) and builds the schedule, with the sends and
// receives in place: a send right after the node that produces its data, a receive posted one
// compute node ahead of the node that reads it.
Schedule make_schedule(ScheduleShape shape);

// The message tag between two neighbouring stages: which boundary, and which way.
int message_tag(int stage_from, int stage_to);

}  // namespace k3::parallel::pipeline
