#include "k3/model/experts/moonep_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "k3/model/quantile_balancing.h"

namespace k3::model {
namespace {

void check(const MoonEpShape& s, std::span<const int64_t> load) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("MoonEP plan: " + what);
  };
  if (s.ranks < 1) fail("the ep group has " + std::to_string(s.ranks) + " ranks");
  if (s.experts < 1 || s.experts % s.ranks != 0)
    fail(std::to_string(s.experts) + " experts do not split evenly over " +
         std::to_string(s.ranks) + " ranks");
  if (s.replica_slots < 0) fail("replica_slots = " + std::to_string(s.replica_slots));
  if (static_cast<int64_t>(load.size()) != s.experts)
    fail(std::to_string(load.size()) + " loads for " + std::to_string(s.experts) + " experts");
  int64_t total = 0;
  for (size_t e = 0; e < load.size(); ++e) {
    if (load[e] < 0) fail("expert " + std::to_string(e) + " has load " + std::to_string(load[e]));
    total += load[e];
  }
  if (total != s.ranks * s.rows_per_rank)
    fail("the loads sum to " + std::to_string(total) +
         " rows, not ranks x S·K = " + std::to_string(s.ranks * s.rows_per_rank));
}

// One replica's worth of rows a rank with `room` rows takes next: {expert, rows}, {-1, 0} if none.
// shed[e]: the rows of e its home rank must still shed; spare[e]: the rows of e its home rank
// computes, where that rank is over-full (0 elsewhere: a full rank is left as it is). In order of
// preference (ties to the lower expert):
//  1. an expert whose home must shed at least `room` rows of it: the one with the fewest such
//     rows; it fills the room alone;
//  2. an expert whose over-full home computes at least `room` rows of it, though it need not
//     shed that many (the one with the fewest): it fills the room, and its home gets room of its
//     own that other experts' rows fill in turn (so excess can travel through a rank instead of
//     every piece of it needing a slot on the emptiest rank);
//  3. the expert with the most rows left to shed, whole.
std::pair<int, int64_t> next_piece(const std::vector<int64_t>& shed,
                                   const std::vector<int64_t>& spare, int64_t room, int first_home,
                                   int last_home) {
  int fits = -1, reroutes = -1, largest = -1;
  for (int e = 0; e < static_cast<int>(shed.size()); ++e) {
    if (e >= first_home && e < last_home) continue;  // this rank's own experts
    if (shed[e] >= room && (fits < 0 || shed[e] < shed[fits])) fits = e;
    if (spare[e] >= room && (reroutes < 0 || spare[e] < spare[reroutes])) reroutes = e;
    if (shed[e] > 0 && (largest < 0 || shed[e] > shed[largest])) largest = e;
  }
  if (fits >= 0) return {fits, room};
  if (reroutes >= 0) return {reroutes, room};
  return {largest, largest < 0 ? 0 : shed[largest]};
}

}  // namespace

MoonEpPlan plan_moonep(const MoonEpShape& s, std::span<const int64_t> load) {
  check(s, load);
  std::vector<int64_t> keep(load.begin(), load.end());     // rows each home rank computes
  std::vector<int64_t> excess(s.ranks, -s.rows_per_rank);  // rows a home rank must shed (if > 0)
  for (int e = 0; e < s.experts; ++e) excess[s.home_rank(e)] += load[e];
  std::vector<int64_t> shed(s.experts), spare(s.experts);  // next_piece's inputs, of the moment
  const auto update = [&] {
    for (int e = 0; e < s.experts; ++e) {
      const int64_t over = excess[s.home_rank(e)];
      shed[e] = std::max<int64_t>(0, std::min(keep[e], over));
      spare[e] = over > 0 ? keep[e] : 0;
    }
  };

  // Under-full ranks take replicas, the emptiest first (ties to the lower rank); a rank that
  // gives away more than its excess (rule 2 of next_piece) joins the queue.
  std::vector<int> queue;
  for (int r = 0; r < s.ranks; ++r)
    if (excess[r] < 0) queue.push_back(r);
  std::stable_sort(queue.begin(), queue.end(), [&](int a, int b) { return excess[a] < excess[b]; });
  MoonEpPlan plan;
  plan.rows.assign(s.ranks, 0);
  plan.replicas.assign(s.ranks, 0);
  std::vector<std::vector<Placement>> replicas(s.experts);
  const int per_rank = s.experts / s.ranks;
  for (size_t q = 0; q < queue.size(); ++q) {
    const int r = queue[q];
    while (excess[r] < 0 && plan.replicas[r] < s.replica_slots) {
      update();
      const auto [e, rows] = next_piece(shed, spare, -excess[r], r * per_rank, (r + 1) * per_rank);
      if (e < 0) break;
      const int home = s.home_rank(e);
      const bool was_over = excess[home] > 0;
      auto same = std::find_if(replicas[e].begin(), replicas[e].end(),
                               [&](const Placement& p) { return p.rank == r; });
      if (same != replicas[e].end()) {
        same->rows += rows;
      } else {
        replicas[e].push_back({r, rows});
        ++plan.replicas[r];
      }
      keep[e] -= rows;
      excess[home] -= rows;
      excess[r] += rows;
      plan.rows[r] += rows;
      if (was_over && excess[home] < 0) queue.push_back(home);
    }
  }

  plan.hosts.resize(s.experts);
  for (int e = 0; e < s.experts; ++e) {
    plan.hosts[e].push_back({s.home_rank(e), keep[e]});
    plan.hosts[e].insert(plan.hosts[e].end(), replicas[e].begin(), replicas[e].end());
    plan.rows[s.home_rank(e)] += keep[e];
  }
  for (int r = 0; r < s.ranks; ++r)
    plan.overflow = std::max(plan.overflow, plan.rows[r] - s.rows_per_rank);
  return plan;
}

double maxvio(std::span<const int64_t> load) {
  return model::ExpertLoadStats::of({load.begin(), load.end()}, 0).maxvio;
}

}  // namespace k3::model
