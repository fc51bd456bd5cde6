#include "k3/sweep/split.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"

namespace k3::sweep {
namespace {

using nlohmann::json;

std::string count_of(int64_t n, const char* what) {
  return strprintf("%lld %s%s", static_cast<long long>(n), what, n == 1 ? "" : "s");
}

}  // namespace

double SplitMeasurement::aggregate() const {
  return std::accumulate(tokens_per_second.begin(), tokens_per_second.end(), 0.0);
}

std::vector<Split> candidate_splits(int64_t cores, std::optional<int64_t> jobs,
                                    std::optional<int64_t> threads) {
  auto fill = [&](int64_t given) { return std::max<int64_t>(1, cores / given); };
  if (jobs && threads) return {{*jobs, *threads}};
  if (jobs) return {{*jobs, fill(*jobs)}};
  if (threads) return {{fill(*threads), *threads}};
  std::vector<Split> out;
  for (int64_t t = 1; t <= cores; ++t)
    if (cores % t == 0) out.push_back({cores / t, t});
  return out;
}

SplitChoice choose_split(const std::vector<Split>& candidates, int64_t jobs_to_run,
                         const MeasureSplit& measure) {
  K3_CHECK(!candidates.empty(), "no split to choose from");
  SplitChoice c;
  c.split = candidates.front();
  if (candidates.size() == 1) return c;
  double best = -1;
  for (const Split& s : candidates) {
    SplitMeasurement m{s, measure(std::clamp<int64_t>(jobs_to_run, 1, s.jobs), s.threads)};
    const double a = m.aggregate();
    if (a > best || (a == best && s.jobs < c.split.jobs)) {
      best = a;
      c.split = s;
    }
    c.measured.push_back(std::move(m));
  }
  return c;
}

std::string describe(const Split& s) {
  return count_of(s.jobs, "job") + " x " + count_of(s.threads, "thread");
}

std::string describe(const SplitChoice& c) {
  const std::string line = "sweep: " + describe(c.split);
  if (c.measured.empty()) return line + ", filling " + count_of(c.cores, "core");
  std::string others;
  double chosen = 0;
  for (const SplitMeasurement& m : c.measured) {
    if (m.split == c.split) {
      chosen = m.aggregate();
      continue;
    }
    others += strprintf("; %lld x %lld: %.0f tok/s", static_cast<long long>(m.split.jobs),
                        static_cast<long long>(m.split.threads), m.aggregate());
  }
  return line + strprintf(" (aggregate %.0f tok/s%s), measured on ", chosen, others.c_str()) +
         c.measured_on;
}

std::string split_json(const SplitChoice& c) {
  json measured = json::array();
  for (const SplitMeasurement& m : c.measured)
    measured.push_back({{"jobs", m.split.jobs},
                        {"threads", m.split.threads},
                        {"tokens_per_second", m.tokens_per_second},
                        {"aggregate", m.aggregate()}});
  const json j = {{"jobs", c.split.jobs},
                  {"threads", c.split.threads},
                  {"cores", c.cores},
                  {"measured_on", c.measured_on},
                  {"measured", std::move(measured)}};
  return j.dump(2) + "\n";
}

Split read_split(const std::string& path) {
  Split s;
  try {
    const json j = json::parse(read_file(path));
    s = {j.at("jobs").get<int64_t>(), j.at("threads").get<int64_t>()};
  } catch (const json::exception& e) {
    throw Error(std::string("unreadable record of the split: ") + e.what(), {path, "", -1});
  }
  K3_CHECK_CTX(s.jobs >= 1 && s.threads >= 1, (ErrorContext{path, "", -1}),
               "expected a positive number of jobs and threads, found ", s.jobs, " x ", s.threads);
  return s;
}

}  // namespace k3::sweep
