// Runs a sweep's jobs, each as its own `k3lab train` process (and `k3lab eval` on sweep.val_data),
// several at once. Resumable: a job with a result is never rerun; a job stopped half-way resumes
// from its newest checkpoint; one that never reached a checkpoint starts again. Each process dies
// with the sweep (PR_SET_PDEATHSIG), so a killed sweep leaves nothing running; SIGINT or SIGTERM
// stops the jobs at their next step, each saving a checkpoint, and the sweep says how to go on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/sweep/jobs.h"
#include "k3/sweep/results.h"

namespace k3::sweep {

struct RunnerOptions {
  std::string k3lab;  // the binary the jobs run
  int64_t parallel = 2;
  bool retry_failed = false;  // run again the jobs whose result is "failed"
};

struct SweepProgress {
  int64_t done = 0, failed = 0, left = 0;
  bool stopped = false;  // a stop signal ended it early
};

// Runs the jobs still to run; progress on stderr (a live line on a terminal, a line per job
// otherwise); OUT/NAME.csv rewritten as each job ends.
SweepProgress run_jobs(const SweepSpec& spec, const std::vector<Job>& jobs,
                       const RunnerOptions& options);
std::string results_path(const SweepSpec& spec);  // OUT/NAME.csv

// Reads every job's result (pending ones have status "").
std::vector<JobResult> read_results(const std::string& out, const std::vector<Job>& jobs);

}  // namespace k3::sweep
