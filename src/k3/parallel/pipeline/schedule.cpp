#include "k3/parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>

#include "k3/base/error.h"
#include "k3/parallel/pipeline/simulate.h"

namespace k3::parallel::pipeline {

const char* fillers_name(Fillers f) {
  switch (f) {
    case Fillers::in_bubbles:
      return "in the bubbles";
    case Fillers::before:
      return "before the pipeline";
    case Fillers::none:
      break;
  }
  return "none";
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  if (name == "zb") return ScheduleKind::zero_bubble;
  throw Error("unknown pipeline schedule '" + name + "': expected gpipe, 1f1b, interleaved or zb");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved:
      return "interleaved";
    case ScheduleKind::zero_bubble:
      return "zb";
  }
  return "?";
}

bool is_compute(Op op) { return op <= Op::filler; }

std::string node_label(const Node& n, int vp) {
  static const char* const names[] = {"F", "B", "B", "W", "E", "sF", "rF", "sB", "rB"};
  std::string s = names[static_cast<int>(n.op)] + std::to_string(n.micro);
  if (vp > 1 && n.op != Op::filler) s += "." + std::to_string(n.chunk);
  return s;
}

double node_cost(const ScheduleShape& shape, const Node& n) {
  const UnitCosts& c = shape.costs;
  const double v = shape.vp;
  switch (n.op) {
    case Op::forward:
      return c.forward / v;
    case Op::backward:
      return (c.backward_input + c.backward_weight) / v;
    case Op::backward_input:
      return c.backward_input / v;
    case Op::backward_weight:
      return c.backward_weight / v;
    case Op::filler:
      return c.filler;
    default:
      return 0;
  }
}

int message_tag(int stage_from, int stage_to) {
  // Boundary b lies between stages b and b + 1; activations cross it forwards, gradients back.
  return stage_to > stage_from ? 2 * stage_from : 2 * stage_to + 1;
}

namespace {

using Order = std::vector<Node>;  // one rank's compute nodes

void check_shape(ScheduleShape& s) {
  K3_CHECK(s.pp >= 1, "pipeline: --pp must be at least 1 (got ", s.pp, ")");
  K3_CHECK(s.vp >= 1, "pipeline: --vp must be at least 1 (got ", s.vp, ")");
  K3_CHECK(s.microbatches >= 1, "pipeline: --microbatches must be at least 1 (got ", s.microbatches,
           ")");
  if (s.kind == ScheduleKind::interleaved) {
    K3_CHECK(s.vp >= 2, "pipeline: the interleaved schedule needs --vp 2 or more (got ", s.vp,
             "); with one chunk a rank it is 1f1b");
    K3_CHECK(s.pp >= 2, "pipeline: the interleaved schedule needs --pp 2 or more");
    if (s.group == 0) s.group = s.pp;
    K3_CHECK(s.group >= s.pp && s.group <= std::max(s.pp, s.microbatches), "pipeline: --group ",
             s.group, " must lie in [pp, microbatches] = [", s.pp, ", ",
             std::max(s.pp, s.microbatches), "]");
    K3_CHECK(s.microbatches >= s.pp,
             "pipeline: the interleaved schedule needs at least pp = ", s.pp,
             " micro-batches (got ", s.microbatches, ")");
  } else {
    K3_CHECK(s.vp == 1, "pipeline: --vp ", s.vp, " needs --kind interleaved (",
             schedule_kind_name(s.kind), " runs one chunk a rank)");
    K3_CHECK(s.group == 0 || s.group == s.pp, "pipeline: --group applies to --kind interleaved");
    s.group = s.pp;
  }
  K3_CHECK(s.costs.forward > 0 && s.costs.backward_input > 0 && s.costs.backward_weight > 0 &&
               s.costs.filler > 0,
           "pipeline: unit costs must be positive");
}

// The backward of a micro-batch chunk: whole, or its input half when the weights' is deferred.
Node backward(const ScheduleShape& s, int micro, int chunk) {
  return {s.kind == ScheduleKind::zero_bubble ? Op::backward_input : Op::backward, micro, chunk};
}

Order gpipe_order(const ScheduleShape& s) {
  Order o;
  for (int m = 0; m < s.microbatches; ++m) o.push_back({Op::forward, m, 0});
  for (int m = 0; m < s.microbatches; ++m) o.push_back(backward(s, m, 0));
  return o;
}

// Warmup forwards, then one forward and one backward in turn, then the remaining backwards:
// forward k and backward k take the k-th (micro-batch, chunk) of `forwards` and `backwards`.
Order one_f_one_b(const std::vector<Node>& forwards, const std::vector<Node>& backwards,
                  int warmup) {
  const int total = static_cast<int>(forwards.size());
  warmup = std::min(warmup, total);
  Order o(forwards.begin(), forwards.begin() + warmup);
  for (int k = 0; k + warmup < total; ++k) {
    o.push_back(forwards[static_cast<size_t>(k + warmup)]);
    o.push_back(backwards[static_cast<size_t>(k)]);
  }
  for (int k = total - warmup; k < total; ++k) o.push_back(backwards[static_cast<size_t>(k)]);
  return o;
}

Order plain_1f1b_order(const ScheduleShape& s, int rank) {
  std::vector<Node> f, b;
  for (int m = 0; m < s.microbatches; ++m) {
    f.push_back({Op::forward, m, 0});
    b.push_back(backward(s, m, 0));
  }
  return one_f_one_b(f, b, s.pp - rank - 1);
}

// Megatron-Core's table: micro-batches in groups of `group`; each group runs through chunk 0,
// then chunk 1, ...; the last group holds what is left. Backwards take the chunks in reverse.
Order interleaved_order(const ScheduleShape& s, int rank) {
  std::vector<Node> f, b;
  for (int first = 0; first < s.microbatches; first += s.group) {
    const int end = first + s.group >= s.microbatches ? s.microbatches : first + s.group;
    for (int c = 0; c < s.vp; ++c)
      for (int m = first; m < end; ++m) {
        f.push_back({Op::forward, m, c});
        b.push_back(backward(s, m, s.vp - 1 - c));
      }
  }
  return one_f_one_b(f, b, (s.pp - rank - 1) * 2 + (s.vp - 1) * s.group);
}

// Places the flexible nodes (W's of a split backward, fillers on rank 0) by running the step on
// paper: a rank that would wait for its next node's input runs a flexible one instead. A filler is
// forced just before the first forward that needs it; a W is forced when a rank holds more than
// pp - 1 - rank of them (ZB-H1 keeps the last stage's weight gradients right behind its B's).
class Placer {
 public:
  Placer(const ScheduleShape& s, std::vector<Order> orders, std::string note)
      : s_(s),
        orders_(std::move(orders)),
        note_(std::move(note)),
        ranks_(static_cast<size_t>(s.pp)) {
    const size_t n = static_cast<size_t>(s.pp * s.vp * s.microbatches);
    forward_end_.assign(n, kUnknown);
    backward_end_.assign(n, kUnknown);
    for (int m = 0; m < s.microbatches && s.fillers != Fillers::none; ++m)
      ranks_[0].fillers.push_back(m);
  }

  std::vector<Order> run() {
    std::vector<Order> out(static_cast<size_t>(s_.pp));
    for (;;) {
      int best = -1;
      Action pick;
      for (int r = 0; r < s_.pp; ++r) {
        const Action a = next_action(r);
        if (a.kind != Action::none && (best < 0 || a.start < pick.start)) {
          best = r;
          pick = a;
        }
      }
      if (best < 0) break;  // every rank is done
      K3_CHECK(pick.start < kUnknown, "pipeline: the ", schedule_kind_name(s_.kind),
               " schedule deadlocks while placing its nodes (pp ", s_.pp, ", vp ", s_.vp, ", ",
               s_.microbatches, " micro-batches)", note_);
      out[static_cast<size_t>(best)].push_back(execute(best, pick));
    }
    return out;
  }

 private:
  static constexpr double kUnknown = std::numeric_limits<double>::infinity();
  struct Action {
    enum Kind { none, fixed, weight, filler } kind = none;
    double start = kUnknown;
  };
  struct RankState {
    size_t next = 0;
    double free = 0;
    std::deque<Node> weights;  // W's whose B has run
    std::deque<int> fillers;   // micro-batches whose filler has not run
  };

  size_t index(int micro, int stage) const {
    return static_cast<size_t>(stage * s_.microbatches + micro);
  }
  int stage(int rank, int chunk) const { return chunk * s_.pp + rank; }
  double cost(const Node& n) const { return node_cost(s_, n); }
  // When the node's input is there (kUnknown: its producer has not run).
  double ready(int rank, const Node& n) const {
    const int st = stage(rank, n.chunk), last = s_.pp * s_.vp - 1;
    if (n.op == Op::forward) return st == 0 ? 0 : forward_end_[index(n.micro, st - 1)];
    if (st == last) return forward_end_[index(n.micro, st)];
    return backward_end_[index(n.micro, st + 1)];
  }

  Action next_action(int r) const {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    const Order& order = orders_[static_cast<size_t>(r)];
    const bool flexible = !st.weights.empty() || !st.fillers.empty();
    if (st.next == order.size())
      return st.weights.empty() ? Action{} : Action{Action::weight, st.free};
    const Node& n = order[st.next];
    if (!st.fillers.empty() && (s_.fillers == Fillers::before ||
                                (n.op == Op::forward && stage(r, n.chunk) == 0 &&
                                 st.fillers.front() <= n.micro)))
      return {Action::filler, st.free};
    if (static_cast<int>(st.weights.size()) > s_.pp - 1 - r) return {Action::weight, st.free};
    const double at = ready(r, n);
    if (at <= st.free) return {Action::fixed, st.free};
    if (flexible) return {st.fillers.empty() ? Action::weight : Action::filler, st.free};
    return {Action::fixed, at};
  }

  Node execute(int r, const Action& a) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    Node n;
    if (a.kind == Action::filler) {
      n = {Op::filler, st.fillers.front(), 0};
      st.fillers.pop_front();
    } else if (a.kind == Action::weight) {
      n = st.weights.front();
      st.weights.pop_front();
    } else {
      n = orders_[static_cast<size_t>(r)][st.next++];
    }
    st.free = a.start + cost(n);
    const size_t i = index(n.micro, stage(r, n.chunk));
    if (n.op == Op::forward) forward_end_[i] = st.free;
    if (n.op == Op::backward || n.op == Op::backward_input) backward_end_[i] = st.free;
    if (n.op == Op::backward_input) st.weights.push_back({Op::backward_weight, n.micro, n.chunk});
    return n;
  }

  const ScheduleShape& s_;
  std::vector<Order> orders_;
  std::string note_;
  std::vector<RankState> ranks_;
  std::vector<double> forward_end_, backward_end_;  // [stage][micro]
};

// What to change when an interleaved order with a short last group deadlocks.
std::string last_group_note(const ScheduleShape& s) {
  const int rest = s.microbatches % s.group;
  if (s.kind != ScheduleKind::interleaved || rest == 0) return "";
  return "; its last group holds " + std::to_string(rest) + " of " +
         std::to_string(s.microbatches) + " micro-batches: choose a --group that divides them";
}

// The finished lists run on paper (simulate.h): a shape whose order deadlocks is refused.
void check_runs(const Schedule& s) {
  try {
    simulate(s);
  } catch (const Error& e) {
    throw Error(e.message() + last_group_note(s.shape));
  }
}

// Adds the communication: a send right after the node that produces it, the receive of a node's
// input posted before the compute node ahead of it (at the start for the first ones).
std::vector<Node> with_messages(const Schedule& s, int rank, const Order& order) {
  const int last = s.stages() - 1;
  auto recv_for = [&](const Node& n) -> std::vector<Node> {
    const int st = s.stage(rank, n.chunk);
    if (n.op == Op::forward && st > 0) return {{Op::recv_forward, n.micro, n.chunk}};
    if ((n.op == Op::backward || n.op == Op::backward_input) && st < last)
      return {{Op::recv_backward, n.micro, n.chunk}};
    return {};
  };
  std::vector<Node> out;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0)
      for (const Node& r : recv_for(order[0])) out.push_back(r);
    if (i + 1 < order.size())
      for (const Node& r : recv_for(order[i + 1])) out.push_back(r);
    const Node& n = order[i];
    out.push_back(n);
    const int st = s.stage(rank, n.chunk);
    if (n.op == Op::forward && st < last) out.push_back({Op::send_forward, n.micro, n.chunk});
    if ((n.op == Op::backward || n.op == Op::backward_input) && st > 0)
      out.push_back({Op::send_backward, n.micro, n.chunk});
  }
  return out;
}

}  // namespace

Schedule make_schedule(ScheduleShape shape) {
  check_shape(shape);
  Schedule s{shape, {}};
  std::vector<Order> orders;
  for (int r = 0; r < shape.pp; ++r) {
    switch (shape.kind) {
      case ScheduleKind::gpipe:
        orders.push_back(gpipe_order(shape));
        break;
      case ScheduleKind::one_f_one_b:
      case ScheduleKind::zero_bubble:
        orders.push_back(plain_1f1b_order(shape, r));
        break;
      case ScheduleKind::interleaved:
        orders.push_back(interleaved_order(shape, r));
        break;
    }
  }
  if (shape.fillers != Fillers::none || s.split_backward())
    orders = Placer(s.shape, std::move(orders), last_group_note(shape)).run();
  for (int r = 0; r < shape.pp; ++r)
    s.ranks.push_back(with_messages(s, r, orders[static_cast<size_t>(r)]));
  check_runs(s);
  return s;
}

}  // namespace k3::parallel::pipeline
