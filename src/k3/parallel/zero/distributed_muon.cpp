#include "k3/parallel/zero/distributed_muon.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <queue>
#include <tuple>
#include <utility>

#include "k3/base/error.h"

namespace k3::parallel {
namespace {

// Tags of the two exchanges. Messages between two ranks under one tag match in the order they
// are posted, and both ends post them in unit order, piece by piece.
constexpr int kGradientTag = 1, kXTag = 2;

// Multiply-adds of Newton–Schulz on one block, step by step (A = XXᵀ, A², (bA + cA²)X).
double ns_cost(const MuonUnit& u, int ns_steps) {
  const double m = static_cast<double>(std::min(u.rows, u.cols)),
               n = static_cast<double>(std::max(u.rows, u.cols));
  return ns_steps * (2 * m * m * n + m * m * m);
}

int64_t bytes_moved(const dist::Comm& c) {
  return c.counters()[dist::Op::send].bytes + c.counters()[dist::Op::recv].bytes;
}

int64_t bytes_of(const MuonPiece& p) {
  return static_cast<int64_t>(p.range.size() * sizeof(float));
}

// Whether group rank `owner` holds piece p's reduced gradient itself.
bool owner_holds(int owner, const MuonPiece& p, int tp, int zero_stage) {
  return p.holder == owner || (zero_stage != 2 && p.holder % tp == owner % tp);
}

// Slot i's units, block by block (a replicated slot's copies on each tp coordinate in turn).
// A part: elements of the unit on tp coordinate t, `n` floats from `local` in the flat buffers,
// at `at` in the unit's layout; ZeRO cuts it into pieces. add_part(u, t, local, n, at) is called
// for each part of unit u (the last one in `out`), in the unit's layout order.
template <typename AddPart>
void add_units(std::vector<MuonUnit>& out, const optim::ParamSet& params, size_t i,
               int64_t block_rows, int tp, AddPart add_part) {
  const optim::ParamSlot& p = params.slots[i];
  const Shape& g = p.global();
  const auto [rows, cols, r] = optim::muon_geometry(p.name, g, block_rows);
  const auto last = static_cast<int>(g.size()) - 1;
  // Rows split: of each `span` global rows (one run per index of the dimensions before the
  // split one), tp coordinate t holds the t-th `share`.
  int64_t inner = 1;
  for (int k = p.split_dim + 1; k < last; ++k) inner *= g[static_cast<size_t>(k)];
  const int64_t share = p.split_dim >= 0 ? p.shape[static_cast<size_t>(p.split_dim)] * inner : 0,
                span = share * tp;
  for (int64_t row0 = 0; row0 < rows; row0 += r) {
    if (p.split_dim < 0) {  // a copy on every tp coordinate
      for (int t = 0; t < tp; ++t) {
        MuonUnit& u = out.emplace_back(MuonUnit{i, row0, r, cols, cols, t, t + 1});
        add_part(u, t, p.offset + static_cast<size_t>(row0 * cols), r * cols, 0);
      }
    } else if (p.split_dim == last) {  // every tp coordinate holds a column panel of every row
      const int64_t panel = p.shape.back();
      MuonUnit& u = out.emplace_back(MuonUnit{i, row0, r, cols, panel, 0, tp});
      for (int t = 0; t < tp; ++t)
        add_part(u, t, p.offset + static_cast<size_t>(row0 * panel), r * panel, t * r * panel);
    } else {  // row-major; the parts in row order
      MuonUnit& u = out.emplace_back(MuonUnit{i, row0, r, cols, cols, tp, 0});
      for (int64_t o = row0 / span; o * span < row0 + r; ++o)
        for (int t = 0; t < tp; ++t) {
          const int64_t at = o * span + t * share, first = std::max(row0, at),
                        end = std::min(row0 + r, at + share);
          if (first >= end) continue;
          add_part(u, t, p.offset + static_cast<size_t>((o * share + first - at) * cols),
                   (end - first) * cols, (first - row0) * cols);
          u.tp_first = std::min(u.tp_first, t);
          u.tp_end = std::max(u.tp_end, t + 1);
        }
    }
  }
}

// Units grouped by (shape, layout) in the order each first appears, as indices into `all`.
std::vector<size_t> processing_order(const std::vector<MuonUnit>& all) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> keys;
  std::vector<std::vector<size_t>> groups;
  for (size_t u = 0; u < all.size(); ++u) {
    const auto key = std::tuple(all[u].rows, all[u].cols, all[u].panel_cols);
    const auto at = static_cast<size_t>(std::find(keys.begin(), keys.end(), key) - keys.begin());
    if (at == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[at].push_back(u);
  }
  std::vector<size_t> order;
  order.reserve(all.size());
  for (const std::vector<size_t>& g : groups) order.insert(order.end(), g.begin(), g.end());
  return order;
}

}  // namespace

// Every slot's units, grouped by (shape, layout) in the order each first appears: owners then
// batch each group's units in this order.
std::vector<MuonUnit> muon_units(const optim::ParamSet& params,
                                 const std::vector<int64_t>& block_rows, const ShardLayout& layout,
                                 int tp) {
  optim::check_block_sizes(params, block_rows);
  auto add_pieces = [&](MuonUnit& u, int t, size_t local, int64_t n, int64_t at) {
    layout.for_each_owner({local, local + static_cast<size_t>(n)}, [&](int d, FlatRange piece) {
      u.pieces.push_back({t + tp * d, piece, at + static_cast<int64_t>(piece.begin - local)});
    });
  };
  std::vector<MuonUnit> all;
  for (size_t i = 0; i < params.slots.size(); ++i)
    add_units(all, params, i, block_rows[i], tp, add_pieces);
  std::vector<MuonUnit> ordered;
  ordered.reserve(all.size());
  for (size_t u : processing_order(all)) ordered.push_back(std::move(all[u]));
  return ordered;
}

std::vector<int> assign_unit_owners(std::span<const MuonUnit> units, int tp, int dp, int ns_steps) {
  K3_CHECK(tp >= 1 && dp >= 1, "distributed Muon: owners over tp ", tp, " x dp ", dp);
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ns_cost(units[a], ns_steps) > ns_cost(units[b], ns_steps);
  });
  // Each tp coordinate's ranks by (load, dp coordinate), least first. Rank t + tp·d grows with
  // (d, t), so the least (load, rank) over a unit's coordinates, found from each coordinate's
  // least, is the rank a scan of all of them in rank order with a strict < would pick.
  using Entry = std::pair<double, int>;  // load, dp coordinate
  using Heap = std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>;
  std::vector<Heap> least;
  least.reserve(static_cast<size_t>(tp));
  std::vector<Entry> idle(static_cast<size_t>(dp));
  for (int d = 0; d < dp; ++d) idle[static_cast<size_t>(d)] = {0.0, d};
  for (int t = 0; t < tp; ++t) least.emplace_back(std::greater<Entry>{}, idle);
  std::vector<int> owners(units.size(), 0);
  for (size_t u : order) {
    const MuonUnit& unit = units[u];
    K3_CHECK(unit.tp_first >= 0 && unit.tp_first < unit.tp_end && unit.tp_end <= tp,
             "distributed Muon: unit ", u, " lies on tp coordinates [", unit.tp_first, ", ",
             unit.tp_end, ") of ", tp);
    int best = unit.tp_first;
    for (int t = unit.tp_first + 1; t < unit.tp_end; ++t) {
      const Entry& a = least[static_cast<size_t>(t)].top();
      const Entry& b = least[static_cast<size_t>(best)].top();
      if (std::pair{a.first, t + tp * a.second} < std::pair{b.first, best + tp * b.second})
        best = t;
    }
    Heap& heap = least[static_cast<size_t>(best)];
    const auto [load, d] = heap.top();
    heap.pop();
    heap.push({load + ns_cost(unit, ns_steps), d});
    owners[u] = best + tp * d;
  }
  return owners;
}

int64_t muon_p2p_bytes(std::span<const MuonUnit> units, std::span<const int> owners, int tp,
                       int zero_stage, int rank) {
  int64_t bytes = 0;
  for (size_t u = 0; u < units.size(); ++u)
    for (const MuonPiece& p : units[u].pieces) {
      if (p.holder == owners[u] || (p.holder != rank && owners[u] != rank)) continue;
      bytes += bytes_of(p);                                                  // X
      if (!owner_holds(owners[u], p, tp, zero_stage)) bytes += bytes_of(p);  // gradient
    }
  return bytes;
}

int64_t muon_p2p_bytes(const optim::ParamSet& params, const std::vector<int64_t>& block_rows,
                       const ShardLayout& layout, int tp, int zero_stage, int ns_steps, int rank) {
  K3_CHECK(tp >= 1 && rank >= 0 && rank < tp * layout.ranks(), "distributed Muon: rank ", rank,
           " of tp ", tp, " x ", layout.ranks());
  optim::check_block_sizes(params, block_rows);
  // The units without their pieces, and each one's parts: tp coordinate and flat range.
  struct Part {
    int t;
    FlatRange range;
  };
  std::vector<MuonUnit> all;
  std::vector<std::vector<Part>> parts;
  auto add_part = [&](MuonUnit&, int t, size_t local, int64_t n, int64_t) {
    parts.resize(all.size());
    parts.back().push_back({t, {local, local + static_cast<size_t>(n)}});
  };
  for (size_t i = 0; i < params.slots.size(); ++i)
    add_units(all, params, i, block_rows[i], tp, add_part);
  parts.resize(all.size());
  const std::vector<size_t> order = processing_order(all);
  std::vector<MuonUnit> units;
  units.reserve(all.size());
  for (size_t u : order) units.push_back(std::move(all[u]));
  const std::vector<int> owners = assign_unit_owners(units, tp, layout.ranks(), ns_steps);
  // The pieces muon_p2p_bytes(units, owners, ...) counts, part by part: of a unit `rank` owns,
  // every piece another rank holds (its X; its gradient unless the holder shares the owner's
  // tp coordinate below ZeRO 2); of another's unit, `rank`'s own pieces, the same way.
  const int me_t = rank % tp, me_d = rank / tp;
  int64_t floats = 0;
  for (size_t k = 0; k < units.size(); ++k) {
    const int owner = owners[k], owner_t = owner % tp;
    for (const Part& p : parts[order[k]]) {
      const int64_t copies = zero_stage == 2 || p.t != owner_t ? 2 : 1;  // X, and the gradient
      if (owner == rank) {
        int64_t others = static_cast<int64_t>(p.range.size());
        if (p.t == me_t) others -= static_cast<int64_t>(layout.floats_of(p.range, me_d));
        floats += copies * others;
      } else if (p.t == me_t) {
        floats += copies * static_cast<int64_t>(layout.floats_of(p.range, me_d));
      }
    }
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

DistributedMuon::DistributedMuon(optim::ParamSet params, const std::vector<int64_t>& block_rows,
                                 optim::MuonConfig config, const ShardLayout& layout,
                                 dist::Comm group, int tp, int zero_stage)
    : params_(std::move(params)),
      config_(config),
      group_(std::move(group)),
      tp_(tp),
      zero_stage_(zero_stage),
      orthogonalizer_(config.momentum, config.ns_steps, config.ns_precision) {
  K3_CHECK(zero_stage >= 0 && zero_stage <= 2, "distributed Muon: ZeRO stage ", zero_stage);
  K3_CHECK(tp >= 1 && group_.size() == tp * layout.ranks() && group_.rank() / tp == layout.rank(),
           "distributed Muon: rank ", group_.rank(), " of a group of ", group_.size(),
           " is not tp coordinate + ", tp, " · rank ", layout.rank(), " of a layout for ",
           layout.ranks());
  units_ = muon_units(params_, block_rows, layout, tp);
  owners_ = assign_unit_owners(units_, tp, layout.ranks(), config.ns_steps);
  int64_t owned = 0, buffered = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const bool mine = owners_[u] == group_.rank();
    momentum_at_.push_back(mine ? owned : -1);
    buffer_at_.push_back(mine && units_[u].spans_tp() ? buffered : -1);
    if (mine) owned += units_[u].numel();
    if (mine && units_[u].spans_tp()) buffered += units_[u].numel();
  }
  momentum_ = Tensor::zeros({owned});
  buffer_ = Tensor::zeros({buffered});
  for (const optim::ParamSlot& p : params_.slots)
    traffic_.all_gather_bytes += shape_numel(p.global()) * static_cast<int64_t>(sizeof(float));
  traffic_.unit_buffer_bytes = static_cast<int64_t>(buffer_.nbytes());
}

float* DistributedMuon::momentum(size_t u) const {
  return momentum_at_[u] < 0 ? nullptr : momentum_.f32() + momentum_at_[u];
}

float* DistributedMuon::home(size_t u) const {
  if (buffer_at_[u] >= 0) return buffer_.f32() + buffer_at_[u];
  const MuonPiece& p = units_[u].pieces.front();  // in place: the layout is the flat buffer's
  return params_.grads + p.range.begin - p.at;
}

int64_t DistributedMuon::expected_p2p_bytes() const {
  return muon_p2p_bytes(units_, owners_, tp_, zero_stage_, group_.rank());
}

template <typename F>
void DistributedMuon::for_each_held_piece(F f) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (owners_[u] != group_.rank())
      for (const MuonPiece& p : units_[u].pieces)
        if (p.holder == group_.rank()) f(u, p);
}

void DistributedMuon::start() {
  const int me = group_.rank();
  bytes_before_ = bytes_moved(group_);
  for_each_held_piece([&](size_t u, const MuonPiece& p) {
    if (!owner_holds(owners_[u], p, tp_, zero_stage_))
      gradient_requests_.push_back(group_.send_async(params_.grads + p.range.begin,
                                                     static_cast<int64_t>(p.range.size()),
                                                     owners_[u], kGradientTag));
  });
  for (size_t u = 0; u < units_.size(); ++u) {
    if (owners_[u] != me) continue;
    for (const MuonPiece& p : units_[u].pieces) {
      const auto n = static_cast<int64_t>(p.range.size());
      if (!owner_holds(me, p, tp_, zero_stage_))
        gradient_requests_.push_back(group_.recv_async(home(u) + p.at, n, p.holder, kGradientTag));
      else if (units_[u].spans_tp())  // held here: copied into the unit's buffer
        std::memcpy(home(u) + p.at, params_.grads + p.range.begin, p.range.size() * sizeof(float));
    }
  }
}

void DistributedMuon::finish(float lr, float grad_scale) {
  const int me = group_.rank();
  dist::wait_all(gradient_requests_);
  gradient_requests_.clear();
  // This rank's pieces of other owners' units: their X arrives where their gradient was, now
  // that the gradient sends reading it are complete.
  std::vector<dist::Request> received, sent;
  for_each_held_piece([&](size_t u, const MuonPiece& p) {
    received.push_back(group_.recv_async(params_.grads + p.range.begin,
                                         static_cast<int64_t>(p.range.size()), owners_[u], kXTag));
  });

  // This rank's units, in runs of one shape and layout up to a batch: orthogonalize, put X in
  // each unit's home, apply this rank's pieces, send every other holder its pieces.
  std::vector<optim::MuonOrthogonalizer::Input> inputs;
  std::vector<size_t> run;
  for (size_t first = 0; first < units_.size();) {
    if (owners_[first] != me) {
      ++first;
      continue;
    }
    const MuonUnit& lead = units_[first];
    const int64_t size = lead.numel();
    const size_t batch = optim::muon_batch_blocks(lead.rows, lead.cols);
    run.clear();
    for (size_t u = first; u < units_.size() && run.size() < batch; ++u) {
      const MuonUnit& v = units_[u];
      if (v.rows != lead.rows || v.cols != lead.cols || v.panel_cols != lead.panel_cols) break;
      if (owners_[u] == me) run.push_back(u);
      first = u + 1;
    }
    inputs.clear();
    for (size_t u : run) inputs.push_back({home(u), momentum(u)});
    const auto count = static_cast<int64_t>(run.size());
    if (x_.numel() < count * size) x_ = Tensor::empty({count * size});
    orthogonalizer_.run(lead.rows, lead.cols, inputs, grad_scale, x_.f32(), lead.panel_cols);
    const float scale = optim::muon_update_scale(lead.rows, lead.cols);
    for (int64_t k = 0; k < count; ++k) {
      const size_t u = run[static_cast<size_t>(k)];
      float* x = home(u);
      std::memcpy(x, x_.f32() + k * size, static_cast<size_t>(size) * sizeof(float));
      for (const MuonPiece& p : units_[u].pieces) {
        const auto n = static_cast<int64_t>(p.range.size());
        if (p.holder == me)
          optim::muon_apply(params_.values + p.range.begin, x + p.at, n, lr, scale,
                            config_.weight_decay);
        else
          sent.push_back(group_.send_async(x + p.at, n, p.holder, kXTag));
      }
    }
  }
  dist::wait_all(received);
  for_each_held_piece([&](size_t u, const MuonPiece& p) {
    optim::muon_apply(params_.values + p.range.begin, params_.grads + p.range.begin,
                      static_cast<int64_t>(p.range.size()), lr,
                      optim::muon_update_scale(units_[u].rows, units_[u].cols),
                      config_.weight_decay);
  });
  dist::wait_all(sent);
  traffic_.p2p_bytes = bytes_moved(group_) - bytes_before_;
  traffic_.x_buffer_bytes = static_cast<int64_t>(x_.nbytes());
  traffic_.workspace_bytes = orthogonalizer_.workspace_bytes();
}

}  // namespace k3::parallel
