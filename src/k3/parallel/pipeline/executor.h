// The one executor of pipeline schedules: it walks this rank's list of nodes (schedule.h) and
// runs each, whatever schedule produced it. Sends and receives are non-blocking MPI
// point-to-point on the pp group: a receive is posted when its node comes and waited for by the
// compute node that reads it; a send's buffer is kept until the step ends, when every send is
// waited for. What a compute node does is the caller's StageWork; the executor owns the messages'
// buffers and times every node (the measured timeline).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/parallel/pipeline/simulate.h"

namespace k3::parallel::pipeline {

// One rank's computation, for chunk `chunk` of micro-batch `micro`.
class StageWork {
 public:
  virtual ~StageWork() = default;
  // Floats of the payload entering the chunk (not read on the first stage) and of the one
  // leaving it (not written on the last).
  virtual int64_t input_floats(int chunk) const = 0;
  virtual int64_t output_floats(int chunk) const = 0;
  virtual void forward(int micro, int chunk, const float* in, float* out) = 0;
  // The backward: reads d_out (not on the last stage), writes d_in (not on the first). With
  // `defer_weights` (zero-bubble schedules) only its input-gradient half: the weight gradients
  // wait for backward_weight.
  virtual void backward(int micro, int chunk, const float* d_out, float* d_in,
                        bool defer_weights) = 0;
  virtual void backward_weight(int micro, int chunk) = 0;
  virtual void filler(int micro) = 0;
};

class Executor {
 public:
  explicit Executor(const dist::Comm& pp) : pp_(pp) {}
  // Runs this rank's nodes of `s`; returns their measured times (seconds from the call).
  std::vector<NodeTime> run(const Schedule& s, StageWork& work);

 private:
  using Key = std::tuple<int, int>;  // (micro, chunk)
  std::vector<float>& buffer(std::map<Key, std::vector<float>>& m, const Node& n, int64_t floats);

  const dist::Comm& pp_;
  // Message buffers by (micro, chunk), reused from step to step.
  std::map<Key, std::vector<float>> in_, out_, d_in_, d_out_;
};

// Every pp rank's measured nodes (Executor::run), on every rank of `pp` (collective there): the
// step's measured timeline, each rank's times from its own start of the step.
Timeline gather_timeline(const dist::Comm& pp, const std::vector<NodeTime>& mine);

}  // namespace k3::parallel::pipeline
