#include "k3/sweep/jobs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"

namespace k3::sweep {
namespace {

namespace fs = std::filesystem;

// Numbers in job ids: short and exact enough to tell grid points apart (3e-03, 30000, 1e+12).
std::string id_number(double v) { return strprintf("%g", v); }

std::vector<std::string> as_overrides(const std::vector<std::pair<std::string, std::string>>& s) {
  std::vector<std::string> out;
  for (const auto& [k, v] : s) out.push_back(k + "=" + v);
  return out;
}

void refuse_owned_keys(const std::vector<std::pair<std::string, std::string>>& settings,
                       const std::string& path, const std::string& where) {
  for (const auto& [k, v] : settings)
    for (const char* owned : {"model.config", "train.lr", "train.steps", "run.dir", "run.name"})
      K3_CHECK_CTX(k != owned, (ErrorContext{path, where + k, -1}),
                   "set by the sweep for each job; remove it here");
}

// A job's run.toml as planned in a checkout that has moved since (a clone elsewhere of a sweep
// directory kept in a repository): its paths hold the old location where the plan holds the new
// one. The location is what precedes the job's own model.json path in both, and every path
// under the old one is moved to the new one; text planned in place comes back unchanged.
std::string relocated(const std::string& text, const std::string& path,
                      const train::RunConfig& plan) {
  const std::string was = train::parse_run_config(text, path).model.config;
  const std::string is = plan.model.config;
  size_t common = 0;  // the shared tail, cut at a '/'
  while (common < was.size() && common < is.size() &&
         was[was.size() - 1 - common] == is[is.size() - 1 - common])
    ++common;
  const size_t tail = is.find('/', is.size() - common);
  if (was == is || tail == std::string::npos || tail == 0) return text;
  const std::string from = was.substr(0, was.size() - (is.size() - tail)) + "/";
  const std::string to = is.substr(0, tail) + "/";
  std::string out;
  for (size_t at = 0;;) {
    const size_t hit = text.find("\"" + from, at);
    if (hit == std::string::npos) return out + text.substr(at);
    out += text.substr(at, hit - at) + "\"" + to;
    at = hit + 1 + from.size();
  }
}

}  // namespace

std::vector<Job> plan_jobs(const SweepSpec& spec) {
  refuse_owned_keys(spec.settings, spec.path, "set.");
  const std::string out = fs::absolute(spec.out).lexically_normal().string();
  std::vector<Job> jobs;
  for (const Arm& arm : spec.arms) {
    refuse_owned_keys(arm.settings, spec.path, "arm " + arm.name + ": set.");
    std::vector<std::string> overrides = as_overrides(spec.settings);
    for (const std::string& o : as_overrides(arm.settings)) overrides.push_back(o);
    overrides.push_back("model.config=" + arm.preset);
    train::RunConfig base;
    try {
      base = train::load_run_config(spec.base_config, overrides);
    } catch (const Error& e) {
      throw e.with_file(spec.path);
    }
    const model::ModelConfig preset = model::load_model_config(arm.preset);
    std::vector<double> sizes = arm.sizes.empty() ? spec.sizes : arm.sizes;
    std::sort(sizes.begin(), sizes.end());
    const bool by_flops = !spec.flops.empty();
    const auto& budgets = by_flops ? spec.flops : spec.tokens_per_param;
    const std::vector<int64_t> batches =
        spec.batch_sizes.empty() ? std::vector<int64_t>{base.train.batch_size} : spec.batch_sizes;
    const std::vector<int64_t> seeds =
        spec.seeds.empty() ? std::vector<int64_t>{base.model.seed} : spec.seeds;
    int64_t previous_params = 0;
    double previous_target = 0;
    for (double target : sizes) {
      const ModelShape shape = shape_for_size(preset, target);
      K3_CHECK_CTX(shape.params != previous_params, (ErrorContext{spec.path, "sweep.sizes", -1}),
                   "arm ", arm.name, ": sizes ", previous_target, " and ", target,
                   " give the same model (N = ", shape.params, "); space the sizes further apart");
      previous_params = shape.params;
      previous_target = target;
      const int64_t T = base.data.seq_len;
      const double flops_per_token = shape.flops_per_token(T);
      for (double budget : budgets)
        for (double lr : arm.lrs.empty() ? spec.lrs : arm.lrs)
          for (int64_t batch : batches)
            for (int64_t seed : seeds) {
              const bool every_seed = spec.seed_sizes.empty() ||
                                      std::find(spec.seed_sizes.begin(), spec.seed_sizes.end(),
                                                target) != spec.seed_sizes.end();
              if (seed != seeds.front() && !every_seed) continue;
              Job j;
              j.arm = arm.name;
              j.target = target;
              j.budget = budget;
              j.budget_is_flops = by_flops;
              j.shape = shape;
              j.lr = lr;
              j.batch_size = batch;
              j.seed = seed;
              j.id = arm.name + "-n" + id_number(target) + (by_flops ? "-c" : "-tpp") +
                     id_number(budget) + "-lr" + id_number(lr) + "-b" + std::to_string(batch) +
                     "-s" + std::to_string(seed);
              const double want = by_flops ? budget / (6.0 * shape.params)
                                           : budget * static_cast<double>(shape.params);
              const int64_t per_step = batch * base.train.grad_accum * T;
              j.steps = std::llround(want / per_step);
              K3_CHECK_CTX(j.steps >= 1,
                           (ErrorContext{spec.path,
                                         by_flops ? "sweep.flops" : "sweep.tokens_per_param", -1}),
                           "job ", j.id, " would train ", want, " tokens, less than one step of ",
                           per_step);
              j.tokens = j.steps * per_step;
              j.flops_6nd = 6.0 * static_cast<double>(shape.params) * j.tokens;
              j.flops_exact = flops_per_token * j.tokens;

              train::RunConfig& c = j.config;
              c = base;
              c.model.config = j.dir(out) + "/model.json";
              c.model.seed = seed;
              c.train.lr = lr;
              c.train.batch_size = batch;
              c.train.steps = j.steps;
              c.train.threads = spec.threads.value_or(0);
              c.eval.every = std::max<int64_t>(1, (j.steps + spec.evals - 1) / spec.evals);
              c.checkpoint.every =
                  c.eval.every;  // a killed job loses at most one evaluation's work
              c.checkpoint.keep_last = 2;
              c.sample.every = 0;
              c.run.name = j.id;
              c.run.dir = j.dir(out) + "/run";
              jobs.push_back(std::move(j));
            }
    }
  }
  return jobs;
}

void set_threads(std::vector<Job>& jobs, int64_t threads) {
  for (Job& j : jobs) j.config.train.threads = threads;
}

void write_job_files(const Job& job, const std::string& out) {
  // 0 would run the job on every core, beside the others.
  K3_CHECK(job.config.train.threads > 0, "job ", job.id, ": its threads are not chosen yet");
  const std::string dir = job.dir(out);
  fs::create_directories(dir);
  const std::string run_toml = dir + "/run.toml", model_json = dir + "/model.json";
  const std::string run_text = train::to_toml(job.config);
  const std::string model_text = model::model_config_to_json(job.shape.config).dump(2) + "\n";
  auto refuse = [&](const std::string& file, const std::string& what) {
    throw Error("job " + job.id + " was planned with other settings (" + what +
                    "); the sweep file changed since it ran: give it a new sweep.out",
                {file, "", -1});
  };
  // Compared as read back, so that a field the format gained since is no change.
  if (file_exists(model_json) &&
      model::model_config_to_json(model::load_model_config(model_json)).dump(2) + "\n" !=
          model_text)
    refuse(model_json, "another model: the preset changed");
  if (file_exists(run_toml)) {
    const std::string before = relocated(read_file(run_toml), run_toml, job.config);
    if (before != run_text) {
      const auto changes =
          train::changed_fields(train::parse_run_config(before, run_toml), job.config);
      refuse(run_toml, changes.empty() ? std::string("the run configuration")
                                       : changes.front().key + ": " + changes.front().from +
                                             " -> " + changes.front().to);
    }
    if (before != read_file(run_toml)) write_file_atomic(run_toml, run_text);  // it moved
  }
  if (!file_exists(model_json)) write_file_atomic(model_json, model_text);
  if (!file_exists(run_toml)) write_file_atomic(run_toml, run_text);
}

}  // namespace k3::sweep
