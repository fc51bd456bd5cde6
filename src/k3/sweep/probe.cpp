#include "k3/sweep/probe.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/stop_signals.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/sweep/process.h"
#include "k3/sweep/runner.h"
#include "k3/train/loop/trainer.h"
#include "k3/train/observe/metrics.h"

namespace k3::sweep {
namespace {

namespace fs = std::filesystem;

// Enough timed steps to span the probes' uneven starts; few enough that a candidate takes seconds.
// On a loaded host a slow candidate's steps take seconds each: once every probe has a timed step
// and kProbeSeconds have passed, the probes are stopped (SIGTERM: at their next step).
constexpr int64_t kWarmupSteps = 1;
constexpr int64_t kTimedSteps = 4;
constexpr double kProbeSeconds = 5;

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
  auto run_dir = [&](int64_t i) { return dir + "/" + std::to_string(i); };
  for (int64_t i = 0; i < jobs; ++i) {
    c.run.name = "probe-" + std::to_string(i);
    c.run.dir = run_dir(i);
    write_file_atomic(c.run.dir + ".toml", train::to_toml(c));
    pids.push_back(
        spawn({k3lab, "train", "--config", c.run.dir + ".toml", "--quiet"}, c.run.dir + ".log"));
  }
  auto all_timed = [&] {
    for (int64_t i = 0; i < jobs; ++i)
      if (steps_recorded(run_dir(i)) <= kWarmupSteps) return false;
    return true;
  };
  Timer since;
  std::vector<std::optional<int>> status(pids.size());
  bool stopping = false;
  while (std::count(status.begin(), status.end(), std::nullopt) > 0) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (int s = 0; !status[i] && waitpid(pids[i], &s, WNOHANG) == pids[i]) status[i] = s;
    if (!stopping && since.seconds() > kProbeSeconds && all_timed()) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!status[i]) kill(pids[i], SIGTERM);
      stopping = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int64_t i = 0; i < jobs; ++i) {
    const int s = *status[i];
    const bool ok =
        WIFEXITED(s) && (WEXITSTATUS(s) == 0 || WEXITSTATUS(s) == train::kStoppedExitStatus);
    K3_CHECK(ok, "the probe of ", jobs, " x ", threads,
             " failed: ", WIFEXITED(s) ? last_line(run_dir(i) + ".log") : signal_name(WTERMSIG(s)),
             " (", run_dir(i), ".log)");
  }
  std::vector<double> rates;
  for (int64_t i = 0; i < jobs; ++i) rates.push_back(tokens_per_second(run_dir(i)));
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
