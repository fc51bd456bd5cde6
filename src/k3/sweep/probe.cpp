#include "k3/sweep/probe.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/stop_signals.h"
#include "k3/base/threads.h"
#include "k3/sweep/process.h"
#include "k3/sweep/runner.h"
#include "k3/train/observe/metrics.h"

namespace k3::sweep {
namespace {

namespace fs = std::filesystem;

// Enough timed steps to span the probes' uneven starts; few enough that a candidate takes seconds.
constexpr int64_t kWarmupSteps = 1;
constexpr int64_t kTimedSteps = 4;

// Tokens over seconds of the steps after the warm-up, as the run recorded them.
double tokens_per_second(const std::string& run_dir) {
  auto series = train::read_metrics(train::metrics_path(run_dir));
  const train::MetricSeries& rate = series["tokens_per_second"];
  const train::MetricSeries& seconds = series["step_seconds"];
  double tokens = 0, time = 0;
  for (size_t i = 0; i < rate.steps.size() && i < seconds.steps.size(); ++i)
    if (rate.steps[i] > kWarmupSteps) {
      tokens += rate.values[i] * seconds.values[i];
      time += seconds.values[i];
    }
  K3_CHECK_CTX(time > 0, (ErrorContext{train::metrics_path(run_dir), "", -1}),
               "the probe recorded no timed step");
  return tokens / time;
}

std::string shape_of(const Job& j) {
  return strprintf("%s, N %lld (hidden %lld, %lld layers), batch %lld x %lld", j.arm.c_str(),
                   static_cast<long long>(j.shape.params), static_cast<long long>(j.shape.hidden),
                   static_cast<long long>(j.shape.layers), static_cast<long long>(j.batch_size),
                   static_cast<long long>(j.config.data.seq_len));
}

}  // namespace

std::vector<double> probe(const Job& job, int64_t jobs, int64_t threads, const std::string& dir,
                          const std::string& k3lab) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_file_atomic(dir + "/model.json",
                    model::model_config_to_json(job.shape.config).dump(2) + "\n");
  train::RunConfig c = job.config;
  c.model.config = dir + "/model.json";
  c.train.steps = kWarmupSteps + kTimedSteps;
  c.train.threads = threads;
  c.eval.every = 0;
  c.checkpoint.every = 0;  // the run still saves its last step, after the timed ones
  c.checkpoint.keep_last = 1;
  c.sample.every = 0;
  c.sample.max_tokens = 1;  // a run samples once at its end
  std::vector<pid_t> pids;
  for (int64_t i = 0; i < jobs; ++i) {
    const std::string base = dir + "/" + std::to_string(i);
    c.run.name = "probe-" + std::to_string(i);
    c.run.dir = base;
    write_file_atomic(base + ".toml", train::to_toml(c));
    pids.push_back(spawn({k3lab, "train", "--config", base + ".toml", "--quiet"}, base + ".log"));
  }
  std::string failure;
  for (int64_t i = 0; i < jobs; ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      const std::string log = dir + "/" + std::to_string(i) + ".log";
      failure = (WIFEXITED(status) ? last_line(log) : std::string(signal_name(WTERMSIG(status)))) +
                " (" + log + ")";
    }
  }
  K3_CHECK(failure.empty(), "the probe of ", jobs, " x ", threads, " failed: ", failure);
  std::vector<double> rates;
  for (int64_t i = 0; i < jobs; ++i)
    rates.push_back(tokens_per_second(dir + "/" + std::to_string(i)));
  return rates;
}

std::string split_path(const SweepSpec& spec) { return spec.out + "/" + spec.name + ".split.json"; }

std::optional<Split> known_split(const SweepSpec& spec) {
  if (spec.parallel && spec.threads) return Split{*spec.parallel, *spec.threads};
  if (!file_exists(split_path(spec))) return std::nullopt;
  Split s = read_split(split_path(spec));
  s.jobs = spec.parallel.value_or(s.jobs);
  s.threads = spec.threads.value_or(s.threads);
  return s;
}

Split settle_split(const SweepSpec& spec, const std::vector<Job>& jobs, const std::string& k3lab) {
  if (const std::optional<Split> known = known_split(spec)) {
    if (!spec.parallel || !spec.threads)
      std::fprintf(stderr, "sweep: %s, as chosen before (%s)\n", describe(*known).c_str(),
                   split_path(spec).c_str());
    return *known;
  }
  const Job& largest = *std::max_element(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return std::pair(a.shape.params, a.batch_size) < std::pair(b.shape.params, b.batch_size);
  });
  int64_t to_run = 0;
  for (const JobResult& r : read_results(spec.out, jobs)) to_run += !r.ended();
  const std::string scratch = spec.out + "/" + spec.name + ".probe";
  SplitChoice c = choose_split(
      candidate_splits(num_cores(), spec.parallel, spec.threads), to_run,
      [&](int64_t n, int64_t threads) { return probe(largest, n, threads, scratch, k3lab); });
  fs::remove_all(scratch);
  c.cores = num_cores();
  c.measured_on = shape_of(largest);
  write_file_atomic(split_path(spec), split_json(c));
  std::fprintf(stderr, "%s\n", describe(c).c_str());
  return c.split;
}

}  // namespace k3::sweep
