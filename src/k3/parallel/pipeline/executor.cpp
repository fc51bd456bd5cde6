#include "k3/parallel/pipeline/executor.h"

#include "k3/base/error.h"
#include "k3/base/timer.h"

namespace k3::parallel::pipeline {

std::vector<float>& Executor::buffer(std::map<Key, std::vector<float>>& m, const Node& n,
                                     int64_t floats) {
  std::vector<float>& b = m[{n.micro, n.chunk}];
  b.resize(static_cast<size_t>(floats));
  return b;
}

std::vector<NodeTime> Executor::run(const Schedule& s, StageWork& work) {
  const int rank = pp_.rank(), last = s.stages() - 1;
  K3_CHECK(pp_.size() == s.shape.pp, "pipeline: a schedule for pp ", s.shape.pp, " run on ",
           pp_.size(), " ranks");
  std::map<std::tuple<Op, int, int>, dist::Request> receives;
  std::vector<dist::Request> sends;
  auto await = [&](Op recv, const Node& n) {
    const auto it = receives.find({recv, n.micro, n.chunk});
    K3_CHECK(it != receives.end(), "pipeline: rank ", rank, "'s ", node_label(n, s.shape.vp),
             " reads a message it posted no receive for");
    it->second.wait();
    receives.erase(it);
  };
  std::vector<NodeTime> times;
  Timer clock;
  for (const Node& n : s.ranks[static_cast<size_t>(rank)]) {
    const int st = s.stage(rank, n.chunk);
    // A node's time starts once its input is here: the wait is idle time, not the node's.
    if (n.op == Op::forward && st > 0) await(Op::recv_forward, n);
    const bool backward = n.op == Op::backward || n.op == Op::backward_input;
    if (backward && st < last) await(Op::recv_backward, n);
    const double start = clock.seconds();
    switch (n.op) {
      case Op::recv_forward: {
        std::vector<float>& b = buffer(in_, n, work.input_floats(n.chunk));
        receives[{n.op, n.micro, n.chunk}] = pp_.recv_async(
            b.data(), static_cast<int64_t>(b.size()), s.rank_of(st - 1), message_tag(st - 1, st));
        continue;
      }
      case Op::recv_backward: {
        std::vector<float>& b = buffer(d_out_, n, work.output_floats(n.chunk));
        receives[{n.op, n.micro, n.chunk}] = pp_.recv_async(
            b.data(), static_cast<int64_t>(b.size()), s.rank_of(st + 1), message_tag(st + 1, st));
        continue;
      }
      case Op::send_forward: {
        const std::vector<float>& b = out_.at({n.micro, n.chunk});
        sends.push_back(pp_.send_async(b.data(), static_cast<int64_t>(b.size()), s.rank_of(st + 1),
                                       message_tag(st, st + 1)));
        continue;
      }
      case Op::send_backward: {
        const std::vector<float>& b = d_in_.at({n.micro, n.chunk});
        sends.push_back(pp_.send_async(b.data(), static_cast<int64_t>(b.size()), s.rank_of(st - 1),
                                       message_tag(st, st - 1)));
        continue;
      }
      case Op::forward: {
        const float* in = st > 0 ? in_.at({n.micro, n.chunk}).data() : nullptr;
        float* out = st < last ? buffer(out_, n, work.output_floats(n.chunk)).data() : nullptr;
        work.forward(n.micro, n.chunk, in, out);
        break;
      }
      case Op::backward:
      case Op::backward_input: {
        const float* d_out = st < last ? d_out_.at({n.micro, n.chunk}).data() : nullptr;
        float* d_in = st > 0 ? buffer(d_in_, n, work.input_floats(n.chunk)).data() : nullptr;
        work.backward(n.micro, n.chunk, d_out, d_in, n.op == Op::backward_input);
        break;
      }
      case Op::backward_weight:
        work.backward_weight(n.micro, n.chunk);
        break;
      case Op::filler:
        work.filler(n.micro);
        break;
    }
    times.push_back({n, start, clock.seconds()});
  }
  for (dist::Request& r : sends) r.wait();
  return times;
}

// Packed as doubles: (op, micro, chunk, start, end) per node.
Timeline gather_timeline(const dist::Comm& pp, const std::vector<NodeTime>& mine) {
  std::vector<int64_t> counts(static_cast<size_t>(pp.size()), 0);
  counts[static_cast<size_t>(pp.rank())] = static_cast<int64_t>(mine.size()) * 5;
  pp.all_reduce(counts.data(), static_cast<int64_t>(counts.size()));
  int64_t total = 0, at = 0;
  for (int r = 0; r < pp.size(); ++r)
    (r < pp.rank() ? at : total) += counts[static_cast<size_t>(r)];
  total += at;
  std::vector<double> all(static_cast<size_t>(total));
  for (const NodeTime& t : mine)
    for (double v : {static_cast<double>(t.node.op), static_cast<double>(t.node.micro),
                     static_cast<double>(t.node.chunk), t.start, t.end})
      all[static_cast<size_t>(at++)] = v;
  pp.all_gather(all.data(), counts);
  Timeline out;
  size_t i = 0;
  for (int r = 0; r < pp.size(); ++r) {
    out.ranks.emplace_back();
    for (int64_t k = 0; k < counts[static_cast<size_t>(r)] / 5; ++k, i += 5)
      out.ranks.back().push_back(
          {{static_cast<Op>(all[i]), static_cast<int>(all[i + 1]), static_cast<int>(all[i + 2])},
           all[i + 3],
           all[i + 4]});
  }
  return out;
}

}  // namespace k3::parallel::pipeline
