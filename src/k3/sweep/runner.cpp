#include "k3/sweep/runner.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/stop_signals.h"
#include "k3/base/timer.h"
#include "k3/sweep/process.h"
#include "k3/train/loop/trainer.h"
#include "k3/train/observe/progress.h"

namespace k3::sweep {
namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

bool has_checkpoint(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints", ec))
    if (e.path().filename().string().starts_with("step_")) return true;
  return false;
}

// Reads the `--json` line `k3lab eval` printed last into the log.
double eval_loss_from_log(const std::string& log) {
  const auto j = nlohmann::json::parse(last_line(log), nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("loss") && j.at("loss").is_number()
             ? j.at("loss").get<double>()
             : NAN;
}

// The wall time of a job's processes, summed over resumptions, kept in JOB_DIR/seconds.
void add_seconds(const std::string& job_dir, double s) {
  const std::string path = job_dir + "/seconds";
  const double before = file_exists(path) ? std::stod(read_file(path)) : 0.0;
  write_file_atomic(path, strprintf("%.3f\n", before + s));
}

struct Running {
  size_t job;
  pid_t pid;
  int evaluating = -1;  // the sweep.val_data text it scores after training; -1: training
  Timer since;
};

}  // namespace

std::vector<JobResult> read_results(const std::string& out, const std::vector<Job>& jobs) {
  std::vector<JobResult> r;
  for (const Job& j : jobs) r.push_back(read_job_result(j.dir(out)));
  return r;
}

std::string results_path(const SweepSpec& spec) { return spec.out + "/" + spec.name + ".csv"; }

SweepProgress run_jobs(const SweepSpec& spec, const std::vector<Job>& jobs,
                       const RunnerOptions& options) {
  const std::string out = fs::absolute(spec.out).lexically_normal().string();
  const std::vector<std::string>& val_data = spec.val_data;
  std::vector<std::string> ood_columns;
  for (const std::string& v : val_data) ood_columns.push_back(ood_column(v));
  std::vector<JobResult> results = read_results(out, jobs);
  // The first val_data text R has no loss on yet (val_data.size(): none).
  auto unscored = [&](const JobResult& r) {
    size_t k = 0;
    while (k < val_data.size() && r.ood.count(ood_columns[k])) ++k;
    return k;
  };
  // A job that ended under a sweep file without some val_data text is scored on it now, not
  // retrained (its final checkpoint is still in its run directory).
  auto scored_only = [&](size_t i) {
    return results[i].status == "done" && unscored(results[i]) < val_data.size();
  };
  std::map<size_t, JobResult> scoring;  // trained jobs whose texts are being scored
  std::deque<size_t> queue;
  for (size_t i = 0; i < jobs.size(); ++i)
    if (!results[i].ended() || (options.retry_failed && results[i].status == "failed") ||
        scored_only(i))
      queue.push_back(i);
  for (const Job& j : jobs) write_job_files(j, out);  // refuses jobs planned otherwise before
  const std::string csv = results_path(spec);
  write_file_atomic(csv, results_csv(jobs, results, ood_columns));

  g_stop = 0;
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  SweepProgress p;
  for (size_t i = 0; i < jobs.size(); ++i) {
    p.done += results[i].status == "done" && !scored_only(i);
    p.failed += results[i].status == "failed" && !options.retry_failed;
  }
  const bool live = isatty(STDERR_FILENO);
  std::vector<Running> running;
  auto status_line = [&] {
    std::string s = strprintf("sweep: %lld done, %lld failed, %zu running, %zu left",
                              static_cast<long long>(p.done), static_cast<long long>(p.failed),
                              running.size(), queue.size());
    for (const Running& r : running) {
      const Job& j = jobs[r.job];
      s += r.evaluating >= 0 ? strprintf(" | %s eval", j.id.c_str())
                             : strprintf(" | %s %lld/%lld", j.id.c_str(),
                                         static_cast<long long>(steps_recorded(j.config.run.dir)),
                                         static_cast<long long>(j.steps));
    }
    return s;
  };
  auto say = [&](const std::string& line) {
    std::fprintf(stderr, live ? "\r\033[K%s\n" : "%s\n", line.c_str());
  };
  // The log of job I's training (EVALUATE -1) or of its score on val_data text EVALUATE.
  auto log_of = [&](size_t i, int evaluate) {
    const std::string dir = jobs[i].dir(out);
    return evaluate >= 0 ? dir + "/eval-" + ood_columns[static_cast<size_t>(evaluate)] + ".log"
                         : dir + "/train.log";
  };
  auto start = [&](size_t i, int evaluate) {
    const Job& j = jobs[i];
    const std::string dir = j.dir(out), run = j.config.run.dir;
    std::vector<std::string> args = {options.k3lab};
    if (evaluate >= 0) {
      args.insert(args.end(),
                  {"eval", "--checkpoint", run, "--data", val_data[static_cast<size_t>(evaluate)],
                   "--batches", std::to_string(spec.val_batches), "--json"});
    } else if (has_checkpoint(run)) {
      args.insert(args.end(), {"train", "--resume", run, "--quiet"});
    } else {
      fs::remove_all(run);  // started, but killed before its first checkpoint: start again
      args.insert(args.end(), {"train", "--config", dir + "/run.toml", "--quiet"});
    }
    running.push_back({i, spawn(args, log_of(i, evaluate)), evaluate, {}});
    if (!live && evaluate < 0) say("started  " + j.id);
  };
  auto finish = [&](size_t i, JobResult r) {
    const std::string dir = jobs[i].dir(out);
    r.seconds = std::stod(read_file(dir + "/seconds"));
    write_job_result(dir, r);
    results[i] = r;
    (r.status == "done" ? p.done : p.failed) += 1;
    write_file_atomic(csv, results_csv(jobs, results, ood_columns));
    std::string scores;
    for (const auto& [column, loss] : r.ood) scores += strprintf(", %s %.4f", column.c_str(), loss);
    say(r.status == "done"
            ? strprintf("done     %s: val_loss %.4f%s (%s)", jobs[i].id.c_str(), r.val_loss,
                        scores.c_str(), train::format_duration(r.seconds).c_str())
            : strprintf("failed   %s: %s", jobs[i].id.c_str(), r.reason.c_str()));
  };

  Timer since_draw;
  bool forwarded = false;
  while (!queue.empty() || !running.empty()) {
    while (!g_stop && !queue.empty() && static_cast<int64_t>(running.size()) < options.parallel) {
      const size_t i = queue.front();
      queue.pop_front();
      if (scored_only(i)) {
        scoring[i] = results[i];
        start(i, static_cast<int>(unscored(results[i])));
      } else {
        start(i, -1);
      }
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (live && since_draw.seconds() > 0.5) {
        std::fprintf(stderr, "\r\033[K%s", status_line().c_str());
        std::fflush(stderr);
        since_draw.reset();
      }
      if (g_stop && !forwarded) {  // a SIGTERM to the sweep alone reaches its jobs too
        for (const Running& r : running) kill(r.pid, SIGTERM);
        queue.clear();
        forwarded = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    auto it = std::find_if(running.begin(), running.end(),
                           [pid](const Running& r) { return r.pid == pid; });
    if (it == running.end()) continue;
    const Running r = *it;
    running.erase(it);
    const Job& j = jobs[r.job];
    const std::string dir = j.dir(out);
    add_seconds(dir, r.since.seconds());
    const bool exited = WIFEXITED(status);
    const int code = exited ? WEXITSTATUS(status) : -1;
    if (!exited || code == train::kStoppedExitStatus || g_stop) {
      // Stopped or killed from outside: not an outcome of the job; it continues next time.
      say(strprintf("stopped  %s (%s)", j.id.c_str(),
                    exited ? "saved a checkpoint" : signal_name(WTERMSIG(status))));
      continue;
    }
    if (code != 0) {
      JobResult f;
      f.status = "failed";
      f.reason = last_line(log_of(r.job, r.evaluating));
      scoring.erase(r.job);
      finish(r.job, f);
      continue;
    }
    if (r.evaluating < 0) {
      JobResult& d = scoring[r.job];
      d = {};
      d.status = "done";
      const train::MetricSeries curve =
          train::read_metrics(train::metrics_path(j.config.run.dir))["val_loss"];
      d.val_loss = curve.values.empty() ? NAN : curve.values.back();
      d.val_loss_smoothed = smoothed_final(curve);
      for (size_t k = 0; k < curve.values.size(); ++k)
        d.val_curve.emplace_back(std::llround(curve.steps[k]), curve.values[k]);
    } else {
      scoring[r.job].ood[ood_columns[static_cast<size_t>(r.evaluating)]] =
          eval_loss_from_log(log_of(r.job, r.evaluating));
    }
    if (const size_t next = unscored(scoring[r.job]); next < val_data.size()) {
      start(r.job, static_cast<int>(next));
    } else {
      const JobResult d = scoring[r.job];
      scoring.erase(r.job);
      finish(r.job, d);
    }
  }
  if (live) std::fprintf(stderr, "\r\033[K");
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  p.stopped = g_stop != 0;
  for (const JobResult& res : read_results(out, jobs)) p.left += !res.ended();
  return p;
}

}  // namespace k3::sweep
