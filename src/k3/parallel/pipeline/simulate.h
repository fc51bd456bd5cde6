// A schedule run on paper: every rank walks its list with unit costs (schedule.h's UnitCosts, a
// chunk's forward and backward at 1/vp of a stage's), a receive is posted when its node comes,
// a send completes at once, and a compute node that reads a message starts when it has arrived.
// This is what the executor does over MPI, so a schedule this finishes cannot deadlock there, and
// the times are the planned timeline that `k3lab schedule pipeline` prints and draws.
#pragma once

#include <vector>

#include "k3/parallel/pipeline/schedule.h"

namespace k3::parallel::pipeline {

struct NodeTime {
  Node node;
  double start = 0, end = 0;
};

// Compute nodes (and fillers) per rank with their start and end, in the rank's order. The same
// shape holds a measured step (the executor's clock, in seconds from the step's start).
struct Timeline {
  std::vector<std::vector<NodeTime>> ranks;

  double makespan() const;      // the latest end
  double busy(int rank) const;  // the rank's time in nodes
  // Idle time over busy time, summed over ranks: (p - 1) / m for 1F1B with equal stages, the
  // ratio (p - 1) / (v·m) of Megatron-Core's formula for the interleaved schedule.
  double bubble_ratio() const;
  // The most micro-batch chunks a rank holds activations for at once: forwards (or the fillers
  // ahead of a first chunk's forward) started whose backward (its weight half, when split) has
  // not ended.
  int peak_in_flight(int rank) const;
};

// Runs the schedule on paper. Throws, naming the ranks and nodes, when it deadlocks (every rank
// waits), when a node reads a message it posted no receive for, or when a receive would match
// another micro-batch's message (messages of one channel are matched in order, as MPI does).
Timeline simulate(const Schedule& s);

}  // namespace k3::parallel::pipeline
