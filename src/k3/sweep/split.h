// How a sweep shares the machine: jobs at once x train.threads of each. Small models do not
// scale across threads (on 2 cores two 1-thread jobs of k3-micro make more tokens in all than one
// 2-thread job), so the right split depends on the model and the machine: for "auto" the sweep
// measures each candidate with short probe trainings (probe.h) and keeps the fastest in all.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace k3::sweep {

struct Split {
  int64_t jobs = 1, threads = 1;
  bool operator==(const Split&) const = default;
};

// A candidate as probed: the tokens per second of each of its probes, run at once.
struct SplitMeasurement {
  Split split;
  std::vector<double> tokens_per_second;
  double aggregate() const;  // their sum
};

struct SplitChoice {
  Split split;
  std::vector<SplitMeasurement> measured;  // in candidate order; empty when one was possible
  int64_t cores = 0;
  std::string measured_on;  // the probes' model and batch
};

// The splits of CORES: a key given as a number keeps it and the other fills the cores (at least
// 1); with both "auto", jobs x threads = cores for each thread count dividing cores, most jobs
// first (on 8: 8 x 1, 4 x 2, 2 x 4, 1 x 8).
std::vector<Split> candidate_splits(int64_t cores, std::optional<int64_t> jobs,
                                    std::optional<int64_t> threads);

// MEASURE(jobs, threads): the tokens per second of each of JOBS probes run at once.
using MeasureSplit = std::function<std::vector<double>(int64_t jobs, int64_t threads)>;

// The candidate whose probes make the most tokens per second in all. One with more jobs than the
// sweep has left to run is measured with, and counted for, the jobs it can use. A tie goes to fewer
// jobs (less memory, each result sooner). A single candidate is taken without measuring.
SplitChoice choose_split(const std::vector<Split>& candidates, int64_t jobs_to_run,
                         const MeasureSplit& measure);

std::string describe(const Split& split);  // "2 jobs x 1 thread"

// One line: "sweep: 2 jobs x 1 thread (aggregate 10480 tok/s; 1 x 2: 6510 tok/s), measured on
// ..." or, unmeasured, "sweep: 2 jobs x 1 thread, filling 2 cores".
std::string describe(const SplitChoice& choice);

// The record a resumed sweep reuses (OUT/NAME.split.json): the split, the cores, what was
// measured. Reading it back gives the split; an unreadable record is refused naming the file.
std::string split_json(const SplitChoice& choice);
Split read_split(const std::string& path);

}  // namespace k3::sweep
