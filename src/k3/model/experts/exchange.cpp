#include "k3/model/experts/exchange.h"

#include <algorithm>
#include <cstring>

#include "k3/base/error.h"

namespace k3::model {

void copy_row_blocks(std::span<const RowBlock> blocks, const float* src, float* dst, int64_t width,
                     bool back) {
  for (const RowBlock& b : blocks) {
    const size_t bytes = static_cast<size_t>(b.rows * width) * sizeof(float);
    if (back)
      std::memcpy(const_cast<float*>(src) + b.from * width, dst + b.to * width, bytes);
    else
      std::memcpy(dst + b.to * width, src + b.from * width, bytes);
  }
}

int64_t ExpertExchange::sent_rows() const {
  int64_t n = 0;
  for (int64_t r : send_rows) n += r;
  return n;
}

int64_t ExpertExchange::replica_sends() const {
  int64_t n = 0;
  for (const std::vector<int>& to : weights_to) n += static_cast<int64_t>(to.size());
  return n;
}

ExpertExchange make_exchange(const MoonEpShape& shape, std::span<const int64_t> loads,
                             const MoonEpPlan* plan, int rank) {
  const int P = shape.ranks, E = shape.experts, per_rank = E / P;
  K3_CHECK(static_cast<int64_t>(loads.size()) == int64_t{P} * E && rank >= 0 && rank < P,
           "expert exchange: ", loads.size(), " loads for ", P, " ranks x ", E, " experts");
  const auto load = [&](int s, int e) { return loads[static_cast<size_t>(s) * E + e]; };
  // The rows of (source s, expert e) that land on host q: where they start among the source's
  // rows of e, and how many. Expert e's rows of source s are [before, before + load) in e's
  // numbering, and its hosts take consecutive runs of that numbering, in order.
  const auto piece = [&](int s, int e, int q) -> std::pair<int64_t, int64_t> {
    if (!plan) return {0, q == shape.home_rank(e) ? load(s, e) : 0};
    int64_t before = 0;
    for (int t = 0; t < s; ++t) before += load(t, e);
    const int64_t lo = before, hi = before + load(s, e);
    int64_t at = 0;
    for (const Placement& p : plan->hosts[static_cast<size_t>(e)]) {
      const int64_t a = std::max(lo, at), b = std::min(hi, at + p.rows);
      if (p.rank == q && a < b) return {a - lo, b - a};
      at += p.rows;
    }
    return {0, 0};
  };

  ExpertExchange x;
  x.ranks = P;
  x.rank = rank;
  x.send_rows.assign(P, 0);
  x.recv_rows.assign(P, 0);
  x.weights_to.resize(P);
  x.weights_from.resize(P);
  // Expert e's hosts in row order; without a plan, the home rank alone.
  std::vector<std::vector<Placement>> host(E);
  for (int e = 0; e < E; ++e)
    host[e] = plan ? plan->hosts[static_cast<size_t>(e)]
                   : std::vector<Placement>{{shape.home_rank(e), 0}};

  // Send side: this rank's sorted rows, expert after expert, split over each expert's hosts.
  std::vector<std::vector<RowBlock>> to(P);  // per destination, `to` = offset within it
  int64_t sorted = 0;
  for (int e = 0; e < E; ++e) {
    for (const Placement& p : host[e]) {
      const auto [first, n] = piece(rank, e, p.rank);
      if (n == 0) continue;
      to[p.rank].push_back({sorted + first, x.send_rows[p.rank], n});
      x.send_rows[p.rank] += n;
    }
    sorted += load(rank, e);
  }
  int64_t at = 0;
  for (int q = 0; q < P; ++q) {
    for (RowBlock b : to[q]) x.pack.push_back({b.from, at + b.to, b.rows});
    at += x.send_rows[q];
  }

  // Receive side: the slots, then each source's pieces in expert order.
  for (int e = rank * per_rank; e < (rank + 1) * per_rank; ++e) x.slot_expert.push_back(e);
  x.home_slots = per_rank;
  for (int e = 0; e < E; ++e)
    if (shape.home_rank(e) != rank)
      for (size_t j = 1; j < host[e].size(); ++j)
        if (host[e][j].rank == rank) x.slot_expert.push_back(e);
  const int slots = x.slots();
  std::vector<int64_t> n(static_cast<size_t>(slots) * P);  // rows of [slot][source]
  for (int k = 0; k < slots; ++k)
    for (int s = 0; s < P; ++s)
      n[static_cast<size_t>(k) * P + s] = piece(s, x.slot_expert[k], rank).second;
  x.slot_first.assign(static_cast<size_t>(slots) + 1, 0);
  for (int k = 0; k < slots; ++k) {
    int64_t rows = 0;
    for (int s = 0; s < P; ++s) rows += n[static_cast<size_t>(k) * P + s];
    x.slot_first[k + 1] = x.slot_first[k] + rows;
  }
  // Slots in expert order, for walking a source's pieces as it sent them.
  std::vector<int> by_expert(slots);
  for (int k = 0; k < slots; ++k) by_expert[k] = k;
  std::sort(by_expert.begin(), by_expert.end(),
            [&](int a, int b) { return x.slot_expert[a] < x.slot_expert[b]; });
  std::vector<int64_t> filled(x.slot_first.begin(), x.slot_first.end() - 1);
  int64_t received = 0;
  for (int s = 0; s < P; ++s)
    for (int k : by_expert) {
      const int64_t rows = n[static_cast<size_t>(k) * P + s];
      if (rows == 0) continue;
      x.unpack.push_back({received, filled[k], rows});
      received += rows;
      filled[k] += rows;
      x.recv_rows[s] += rows;
    }
  for (int s = 0; s < P; ++s)
    for (int e = rank * per_rank; e < (rank + 1) * per_rank; ++e) x.home_rows += load(s, e);

  // Replica weights travel from each home rank to the replica's host.
  for (int k = x.home_slots; k < slots; ++k)
    x.weights_from[shape.home_rank(x.slot_expert[k])].push_back(x.slot_expert[k]);
  for (int e = rank * per_rank; e < (rank + 1) * per_rank; ++e)
    for (size_t j = 1; j < host[e].size(); ++j) x.weights_to[host[e][j].rank].push_back(e);
  return x;
}

}  // namespace k3::model
