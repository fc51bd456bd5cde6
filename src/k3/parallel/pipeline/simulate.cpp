#include "k3/parallel/pipeline/simulate.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "k3/base/error.h"

namespace k3::parallel::pipeline {

double Timeline::makespan() const {
  double end = 0;
  for (const auto& rank : ranks)
    for (const NodeTime& t : rank) end = std::max(end, t.end);
  return end;
}

double Timeline::busy(int rank) const {
  double sum = 0;
  for (const NodeTime& t : ranks[static_cast<size_t>(rank)]) sum += t.end - t.start;
  return sum;
}

double Timeline::bubble_ratio() const {
  double busy_all = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) busy_all += busy(r);
  const double span = makespan() - [&] {  // from the earliest start
    double first = makespan();
    for (const auto& rank : ranks)
      if (!rank.empty()) first = std::min(first, rank.front().start);
    return first;
  }();
  return (span * static_cast<double>(ranks.size()) - busy_all) / busy_all;
}

int Timeline::peak_in_flight(int rank) const {
  const auto& nodes = ranks[static_cast<size_t>(rank)];
  const bool split = std::any_of(nodes.begin(), nodes.end(), [](const NodeTime& t) {
    return t.node.op == Op::backward_weight;
  });
  // A micro-batch's first chunk is in flight from its filler (whose activations it keeps).
  std::set<int> filled;
  int now = 0, peak = 0;
  for (const NodeTime& t : nodes) {
    if (t.node.op == Op::filler) filled.insert(t.node.micro);
    if (t.node.op == Op::filler || (t.node.op == Op::forward && !(t.node.chunk == 0 &&
                                                                   filled.count(t.node.micro))))
      peak = std::max(peak, ++now);
    if (t.node.op == (split ? Op::backward_weight : Op::backward)) --now;
  }
  return peak;
}

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// (sending rank, receiving rank, tag)
using Channel = std::tuple<int, int, int>;

struct Sent {
  int micro;
  double at;
};

class PaperRun {
 public:
  explicit PaperRun(const Schedule& s) : s_(s), ranks_(static_cast<size_t>(s.shape.pp)) {
    timeline_.ranks.resize(ranks_.size());
  }

  Timeline run() {
    for (;;) {
      int best = -1;
      double start = kNever;
      bool work = false;
      for (int r = 0; r < s_.shape.pp; ++r) {
        if (ranks_[static_cast<size_t>(r)].next == list(r).size()) continue;
        work = true;
        const double t = next_start(r);
        if (t < start) {
          start = t;
          best = r;
        }
      }
      if (!work) break;
      if (best < 0) deadlock();
      execute(best, start);
    }
    check_all_matched();
    return std::move(timeline_);
  }

 private:
  struct Posted {
    Channel channel;
    size_t position;  // among the receives posted on the channel
    bool used = false;
  };
  struct RankState {
    size_t next = 0;
    double free = 0;
    std::map<std::tuple<Op, int, int>, Posted> posted;  // (recv op, micro, chunk)
    std::set<std::tuple<Op, int, int>> done;            // compute nodes run: (op, micro, chunk)
  };

  const std::vector<Node>& list(int r) const { return s_.ranks[static_cast<size_t>(r)]; }
  std::string where(int r, const Node& n) const {
    return "rank " + std::to_string(r) + "'s " + node_label(n, s_.shape.vp);
  }

  // The receive a compute node reads from (op recv_*), or none.
  static bool reads(const Schedule& s, int r, const Node& n, Op& recv) {
    const int st = s.stage(r, n.chunk);
    if (n.op == Op::forward && st > 0) return recv = Op::recv_forward, true;
    if ((n.op == Op::backward || n.op == Op::backward_input) && st < s.stages() - 1)
      return recv = Op::recv_backward, true;
    return false;
  }
  Channel channel_of(int r, const Node& n) const {
    const int st = s_.stage(r, n.chunk);
    const int peer = n.op == Op::send_forward || n.op == Op::recv_backward ? st + 1 : st - 1;
    K3_CHECK(peer >= 0 && peer < s_.stages(), where(r, n), " talks to stage ", peer,
             ", which does not exist");
    const bool sending = n.op == Op::send_forward || n.op == Op::send_backward;
    return sending ? Channel{r, s_.rank_of(peer), message_tag(st, peer)}
                   : Channel{s_.rank_of(peer), r, message_tag(peer, st)};
  }
  // When rank r's next node can start (kNever: its message has not been sent yet).
  double next_start(int r) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    const Node& n = list(r)[st.next];
    Op recv;
    if (!is_compute(n.op) || !reads(s_, r, n, recv)) return st.free;
    const auto it = st.posted.find({recv, n.micro, n.chunk});
    K3_CHECK(it != st.posted.end() && !it->second.used, where(r, n),
             " reads a message it posted no receive for");
    const auto& sent = sends_[it->second.channel];
    if (sent.size() <= it->second.position) return kNever;
    const Sent& m = sent[it->second.position];
    K3_CHECK(m.micro == n.micro, where(r, n), " would receive micro-batch ", m.micro,
             "'s message: a channel's messages arrive in the order they were sent");
    return std::max(st.free, m.at);
  }

  void execute(int r, double start) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    const Node& n = list(r)[st.next++];
    if (n.op == Op::recv_forward || n.op == Op::recv_backward) {
      const Channel ch = channel_of(r, n);
      K3_CHECK(st.posted.count({n.op, n.micro, n.chunk}) == 0, where(r, n), " is posted twice");
      st.posted[{n.op, n.micro, n.chunk}] = {ch, posted_[ch]++};
      return;
    }
    if (n.op == Op::send_forward || n.op == Op::send_backward) {
      sends_[channel_of(r, n)].push_back({n.micro, st.free});
      return;
    }
    Op recv;
    if (reads(s_, r, n, recv)) st.posted[{recv, n.micro, n.chunk}].used = true;
    check_order(r, n);
    st.free = start + node_cost(s_.shape, n);
    timeline_.ranks[static_cast<size_t>(r)].push_back({n, start, st.free});
  }

  // A rank's own dependencies: a backward after its forward, a weight gradient after its input
  // half, the first stage's forward after the micro-batch's filler when there are fillers.
  void check_order(int r, const Node& n) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    auto need = [&](Op op, int chunk, const char* what) {
      K3_CHECK(st.done.count({op, n.micro, chunk}), where(r, n), " runs before ", what);
    };
    if (n.op == Op::backward || n.op == Op::backward_input)
      need(Op::forward, n.chunk, "its forward");
    if (n.op == Op::backward_weight) need(Op::backward_input, n.chunk, "its input gradients");
    if (n.op == Op::forward && s_.shape.fillers != Fillers::none && s_.stage(r, n.chunk) == 0)
      need(Op::filler, 0, "its filler");
    K3_CHECK(st.done.insert({n.op, n.micro, n.chunk}).second, where(r, n), " runs twice");
  }

  [[noreturn]] void deadlock() const {
    std::string waits;
    for (int r = 0; r < s_.shape.pp; ++r) {
      const RankState& st = ranks_[static_cast<size_t>(r)];
      if (st.next < list(r).size())
        waits += (waits.empty() ? "" : "; ") + where(r, list(r)[st.next]) + " waits";
    }
    throw Error("pipeline: the schedule deadlocks: " + waits);
  }

  void check_all_matched() const {
    for (const auto& [ch, sent] : sends_) {
      const auto it = posted_.find(ch);
      const size_t posted = it == posted_.end() ? 0 : it->second;
      K3_CHECK(posted == sent.size(), "pipeline: rank ", std::get<0>(ch), " sends ", sent.size(),
               " messages with tag ", std::get<2>(ch), " to rank ", std::get<1>(ch),
               ", which posts ", posted, " receives for them");
    }
    for (const auto& [ch, posted] : posted_)
      K3_CHECK(sends_.count(ch), "pipeline: rank ", std::get<1>(ch), " posts ", posted,
               " receives with tag ", std::get<2>(ch), " from rank ", std::get<0>(ch),
               ", which sends none");
  }

  const Schedule& s_;
  std::vector<RankState> ranks_;
  std::map<Channel, std::vector<Sent>> sends_;
  std::map<Channel, size_t> posted_;
  Timeline timeline_;
};

}  // namespace

Timeline simulate(const Schedule& s) { return PaperRun(s).run(); }

}  // namespace k3::parallel::pipeline
