// What a sweep's job left: OUT/jobs/ID/result.json once it has ended, read from the run's
// metrics; and the sweep's table, OUT/results.csv, one row per planned job.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "k3/sweep/jobs.h"
#include "k3/train/observe/metrics.h"

namespace k3::sweep {

struct JobResult {
  std::string status;              // "done", "failed", or "" while it has not ended
  std::string reason;              // why it failed: the last line the job printed
  double val_loss = NAN;           // at the last step
  double val_loss_smoothed = NAN;  // see smoothed_final
  // Every evaluation of the run: (step, validation loss), the learning curve in brief.
  std::vector<std::pair<int64_t, double>> val_curve;
  std::map<std::string, double> ood;  // per sweep.val_data text: its column (ood_column) -> loss
  double seconds = NAN;               // wall time of its processes, summed over resumptions
  bool ended() const { return !status.empty(); }
};

JobResult read_job_result(const std::string& job_dir);  // status "" when there is none yet
void write_job_result(const std::string& job_dir, const JobResult& result);

// The final validation loss with less of one evaluation's wobble: a least-squares line through
// the last quarter of the evaluations (at least three when there are), read at the last one.
// CURVE: the run's "val_loss" series (train::read_metrics).
double smoothed_final(const train::MetricSeries& curve);

// One row per job: its coordinates, N, D, FLOPs (6ND and the model's exact count), the losses
// (one column per OOD_COLUMNS entry, as ood_column names them).
std::string results_csv(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                        const std::vector<std::string>& ood_columns);

}  // namespace k3::sweep
