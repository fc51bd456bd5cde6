// A sweep's jobs: every combination of arm, size, token budget, learning rate, batch size and
// seed, each a training run of its own in OUT/jobs/ID/ (model.json, run.toml, run/, train.log,
// result.json once it has ended).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/sweep/shapes.h"
#include "k3/sweep/spec.h"
#include "k3/train/config/run_config.h"

namespace k3::sweep {

struct Job {
  std::string id;  // stable across runs of the sweep: the job's directory name
  std::string arm;
  double target = 0;  // the size asked for
  double budget = 0;  // tokens per parameter, or the compute budget C (spec.flops)
  bool budget_is_flops = false;
  ModelShape shape;
  double lr = 0;
  int64_t batch_size = 0, seed = 0;
  int64_t steps = 0, tokens = 0;  // D = steps · tokens per step
  double flops_6nd = 0, flops_exact = 0;
  train::RunConfig config;  // resolved; model.config and run.dir point into the job's directory

  std::string dir(const std::string& out) const { return out + "/jobs/" + id; }
};

// Every job, in the order they run: arm by arm, smaller models first. Refuses in one line a
// setting the sweep owns (model.config, train.lr, train.steps, run.dir, run.name) and a budget too
// small for one step. train.threads is the sweep's `threads`; with "auto", 0 until the split is
// chosen (set_threads).
std::vector<Job> plan_jobs(const SweepSpec& spec);

void set_threads(std::vector<Job>& jobs, int64_t threads);  // train.threads of every job

// Writes the job's model.json and run.toml where missing. A job planned before with other
// settings (the sweep file was edited since) is refused naming the job and the first key that
// changed, whether it has run or not.
void write_job_files(const Job& job, const std::string& out);

}  // namespace k3::sweep
