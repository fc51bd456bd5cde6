// --search: layouts of a GPU count, planned, the ones that fit ranked by step time. The space:
// tp within a node (with sequence parallelism), cp 1 or 2 beside it, ep a power of two dividing
// the experts, pp up to 16 with 1 or 2 chunks a rank. A layout whose weights and optimizer share
// alone cannot fit (the dense parameters over tp·pp, the routed experts over tp·ep·pp) is passed
// over unplanned; the others are screened with pipeline rank 0's memory, and the fastest 3·top
// that fit completed with their other memory ranks. A layout whose compute, bubble and update alone
// take longer than the 3·top fastest fitting steps screened so far, or whose rank 0 overflows the
// GPU with its activations and buffers alone, is passed over undescribed. Layouts that differ only
// in dp and cp share the description of their pipeline ranks (what a rank holds), and the groups
// are planned side by side on the OpenMP threads.
#include <malloc.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <optional>
#include <queue>

#include "k3/base/error.h"
#include "k3/planner/plan.h"
#include "k3/planner/plan_internal.h"

namespace k3::planner {
namespace {

// A search describes ranks of hundreds of MB one after another. By default the allocator hands
// such blocks back to the system when they are freed, and the next description faults every page
// in anew (a first touch costs ~10 µs a page): half the search's time on a K3 model. Kept in the
// heap, the freed memory serves the next description.
void keep_freed_memory() {
  static const bool kept = [] {
    return mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  }();
  (void)kept;
}

}  // namespace

std::vector<Plan> search_layouts(const PlanRequest& r, int64_t gpus, size_t top) {
  return detail::search_layouts(r, gpus, top, /*bounded=*/true);
}

std::vector<Plan> detail::search_layouts(const PlanRequest& r, int64_t gpus, size_t top,
                                         bool bounded, size_t* passed_over) {
  detail::check_settings(r);  // refused once here, not as every candidate's failure
  keep_freed_memory();
  K3_CHECK(gpus >= 1 && gpus <= kMaxGpus, "--gpus ", gpus, ": must be in [1, ", kMaxGpus, "]");
  const model::ModelConfig& c = r.model;
  const int64_t node = r.cluster.gpus_per_node;
  const ModelCounts counts = count_model(c);
  // The candidates, grouped by what their ranks hold (tp, ep, pp, vp): a group's layouts differ
  // in cp and dp only and share one description of each pipeline rank.
  std::map<std::array<int64_t, 4>, std::vector<std::pair<size_t, PlanRequest>>> groups;
  size_t order = 0;  // ties keep the order tried
  auto powers = [](int64_t most) {
    std::vector<int64_t> v;
    for (int64_t n = 1; n <= most; n *= 2) v.push_back(n);
    return v;
  };
  for (int64_t tp : powers(node))
    for (int64_t cp : powers(std::min<int64_t>(2, node / tp)))
      for (int64_t ep : powers(c.num_experts > 0 ? std::min(c.num_experts, gpus) : 1))
        for (int64_t pp : powers(std::min<int64_t>(16, c.num_hidden_layers)))
          for (int64_t vp = 1; vp <= (pp > 1 ? 2 : 1); ++vp) {
            const int64_t cell = tp * cp * ep * pp;
            if (gpus % cell != 0 || pp * vp > c.num_hidden_layers ||
                (ep > 1 && c.num_experts % ep != 0))
              continue;
            PlanRequest q = r;
            q.layout.tp = tp, q.layout.cp = cp, q.layout.ep = ep, q.layout.pp = pp;
            q.layout.vp = vp, q.layout.dp = gpus / cell;
            const Precision& pr = r.cluster.precision;
            const double shards = r.layout.zero >= 1 ? static_cast<double>(gpus / cell) : 1.0;
            const double optimizer = r.optimizer_on_host ? 0 : (pr.master + 4) / shards;
            if (counts.values_per_gpu(q.layout) * (pr.weight + optimizer) > r.cluster.hbm_bytes)
              continue;
            q.layout.sequence_parallel = tp > 1;
            q.layout.moonep = r.layout.moonep && ep > 1;
            groups[{tp, ep, pp, vp}].emplace_back(order++, q);
          }
  // A bound below each candidate's step time, its compute, bubble and update: a candidate whose
  // bound exceeds the slowest of the fastest 3·top fitting steps screened so far cannot be among
  // the fastest 3·top, and is passed over undescribed. The groups go by their lowest bound, so that
  // the bar falls early; which candidates it spares depends on the threads' timing, the fastest
  // 3·top do not.
  struct Group {
    double bound = 0;  // the lowest of its candidates'
    std::vector<std::pair<size_t, PlanRequest>>* requests = nullptr;
    std::vector<double> bounds;
  };
  std::vector<Group> work;
  for (auto& [key, requests] : groups) {
    Group g{std::numeric_limits<double>::infinity(), &requests, {}};
    for (const auto& [tried, q] : requests) {
      double bound = -std::numeric_limits<double>::infinity();  // planned, and refused there
      try {
        bound = detail::step_bound(q, counts);
      } catch (const Error&) {
      }
      g.bounds.push_back(bound);
      g.bound = std::min(g.bound, bound);
    }
    work.push_back(std::move(g));
  }
  std::stable_sort(work.begin(), work.end(),
                   [](const Group& a, const Group& b) { return a.bound < b.bound; });
  const size_t keep = 3 * top;
  std::priority_queue<double> fastest;  // the fastest `keep` fitting steps so far, slowest on top
  // Screened with pipeline rank 0's memory, the groups side by side.
  std::vector<std::vector<std::pair<size_t, Plan>>> screened(work.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t g = 0; g < work.size(); ++g) {
    // A described K3 rank takes hundreds of MB: a thread holds one group's at a time.
    detail::DescribedRanks described;
    for (size_t i = 0; i < work[g].requests->size(); ++i) {
      const auto& [tried, q] = (*work[g].requests)[i];
      bool beyond = false;
#pragma omp critical(search_fastest)
      {
        beyond = bounded && fastest.size() == keep && work[g].bounds[i] > fastest.top();
        if (beyond && passed_over) ++*passed_over;
      }
      if (beyond) continue;
      try {
        Plan floor = detail::memory_floor(q);
        if (bounded && !floor.fits()) {
#pragma omp critical(search_fastest)
          if (passed_over) ++*passed_over;
          continue;
        }
        Plan p =
            detail::make_plan(std::move(floor), counts, /*every_memory_rank=*/false, described);
        if (!p.fits()) continue;
#pragma omp critical(search_fastest)
        {
          fastest.push(p.step_seconds);
          if (fastest.size() > keep) fastest.pop();
        }
        screened[g].emplace_back(tried, std::move(p));
      } catch (const Error&) {
        // a layout the model or the batch does not admit
      }
    }
  }
  struct Screened {
    size_t tried, group;  // the order tried, the index into `work`
    Plan plan;
  };
  std::vector<Screened> fitting;
  for (size_t g = 0; g < screened.size(); ++g)
    for (auto& [tried, p] : screened[g]) fitting.push_back({tried, g, std::move(p)});
  std::sort(fitting.begin(), fitting.end(), [](const Screened& a, const Screened& b) {
    return std::pair{a.plan.step_seconds, a.tried} < std::pair{b.plan.step_seconds, b.tried};
  });
  // The fastest 3·top planned in full: their other memory ranks (the second and the last) beside
  // rank 0's, as make_plan with every memory rank. They go fastest first, and once `top` of them
  // fit the slower ones cannot rank: those are left undescribed. A group's go one after another
  // on one thread, sharing their described ranks.
  fitting.resize(std::min(fitting.size(), 3 * top));
  std::vector<std::vector<size_t>> siblings;  // indices into `fitting` by group, fastest first
  std::map<size_t, size_t> sibling_of;        // the group's place in `siblings`
  for (size_t i = 0; i < fitting.size(); ++i) {
    const auto [at, added] = sibling_of.try_emplace(fitting[i].group, siblings.size());
    if (added) siblings.emplace_back();
    siblings[at->second].push_back(i);
  }
  std::vector<std::optional<Plan>> full(fitting.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t s = 0; s < siblings.size(); ++s) {
    detail::DescribedRanks described;
    for (size_t i : siblings[s]) {
      size_t faster_fit = 0;
#pragma omp critical(search_complete)
      for (size_t j = 0; j < i; ++j) faster_fit += full[j].has_value();
      if (faster_fit >= top) break;  // and the group's slower ones
      Plan p = std::move(fitting[i].plan);
      detail::add_memory_ranks(p, described);
      if (p.fits()) {
#pragma omp critical(search_complete)
        full[i] = std::move(p);
      }
    }
  }
  std::vector<Plan> best;
  for (std::optional<Plan>& p : full)
    if (p) best.push_back(std::move(*p));
  auto faster = [](const Plan& a, const Plan& b) { return a.step_seconds < b.step_seconds; };
  K3_CHECK(!best.empty(), "--search: no layout of ", gpus,
           " GPUs fits the model in memory with these settings");
  std::stable_sort(best.begin(), best.end(), faster);
  if (best.size() > top) best.resize(top);
  return best;
}

}  // namespace k3::planner
