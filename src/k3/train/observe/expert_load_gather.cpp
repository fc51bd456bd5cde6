#include "k3/train/observe/expert_load_gather.h"

#include <algorithm>
#include <vector>

namespace k3::train {
namespace {

// A record's figures as int64s: the layer count, then per layer (layer, tokens, experts,
// load...); the dispatch count, then per layer (layer, ranks, rows..., home rows..., replicas,
// overflow, bytes, the plan loads' count, plan loads...). maxvio, min, max and idle follow from
// the load.
std::vector<int64_t> encode(const ExpertLoadRecord& r) {
  std::vector<int64_t> out{static_cast<int64_t>(r.layers.size())};
  for (const auto& [layer, st] : r.layers) {
    out.insert(out.end(), {layer, st.tokens, static_cast<int64_t>(st.load.size())});
    out.insert(out.end(), st.load.begin(), st.load.end());
  }
  out.push_back(static_cast<int64_t>(r.dispatch.size()));
  for (const auto& [layer, d] : r.dispatch) {
    out.insert(out.end(), {layer, static_cast<int64_t>(d.rows.size())});
    out.insert(out.end(), d.rows.begin(), d.rows.end());
    out.insert(out.end(), d.home_rows.begin(), d.home_rows.end());
    out.insert(out.end(), {d.replicas, d.overflow, d.bytes});
    out.push_back(static_cast<int64_t>(d.plan_loads.size()));
    out.insert(out.end(), d.plan_loads.begin(), d.plan_loads.end());
  }
  return out;
}

// Reads one rank's block at AT (advanced past it) into OUT.
void decode(const int64_t*& at, ExpertLoadRecord& out) {
  const auto take = [&](int64_t n) {
    std::vector<int64_t> v(at, at + n);
    at += n;
    return v;
  };
  for (int64_t i = 0, n = *at++; i < n; ++i) {
    const int64_t layer = at[0], tokens = at[1], experts = at[2];
    at += 3;
    out.layers[layer] = model::ExpertLoadStats::of(take(experts), tokens);
  }
  for (int64_t i = 0, n = *at++; i < n; ++i) {
    const int64_t layer = at[0], ranks = at[1];
    at += 2;
    model::DispatchStats& d = out.dispatch[layer];
    d.rows = take(ranks);
    d.home_rows = take(ranks);
    d.replicas = at[0];
    d.overflow = at[1];
    d.bytes = at[2];
    at += 3;
    d.plan_loads = take(*at++);
  }
}

}  // namespace

ExpertLoadRecord gather_expert_load(const dist::Comm& pp, ExpertLoadRecord mine) {
  if (pp.size() == 1) return mine;
  const std::vector<int64_t> block = encode(mine);
  std::vector<int64_t> counts(static_cast<size_t>(pp.size()), 0);
  counts[static_cast<size_t>(pp.rank())] = static_cast<int64_t>(block.size());
  pp.all_reduce(counts.data(), static_cast<int64_t>(counts.size()));
  int64_t total = 0, at = 0;
  for (int r = 0; r < pp.size(); ++r) {
    if (r == pp.rank()) at = total;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<int64_t> all(static_cast<size_t>(total));
  std::copy(block.begin(), block.end(), all.begin() + at);
  pp.all_gather(all.data(), counts);
  ExpertLoadRecord out;
  out.step = mine.step;
  const int64_t* p = all.data();
  for (int r = 0; r < pp.size(); ++r) decode(p, out);
  return out;
}

}  // namespace k3::train
