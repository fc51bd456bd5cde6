#include "k3/sweep/results.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"

namespace k3::sweep {
namespace {

using nlohmann::json;

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double number_of(const json& j, const char* key) {
  return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : NAN;
}
// Losses with every digit, so that a table read back gives the same numbers.
std::string csv_number(double v) { return std::isfinite(v) ? strprintf("%.17g", v) : ""; }

}  // namespace

JobResult read_job_result(const std::string& job_dir) {
  const std::string path = job_dir + "/result.json";
  JobResult r;
  if (!file_exists(path)) return r;
  json j;
  try {
    j = json::parse(read_file(path));
    r.status = j.at("status").get<std::string>();
  } catch (const json::exception& e) {
    throw Error(std::string("unreadable job result: ") + e.what(), {path, "", -1});
  }
  K3_CHECK_CTX(r.status == "done" || r.status == "failed", (ErrorContext{path, "status", -1}),
               "expected done or failed, found ", r.status);
  if (j.contains("reason") && j.at("reason").is_string()) r.reason = j.at("reason");
  r.val_loss = number_of(j, "val_loss");
  r.val_loss_smoothed = number_of(j, "val_loss_smoothed");
  if (j.contains("val_curve") && j.at("val_curve").is_array())
    for (const json& point : j.at("val_curve"))
      if (point.is_array() && point.size() == 2 && point[0].is_number() && point[1].is_number())
        r.val_curve.emplace_back(point[0].get<int64_t>(), point[1].get<double>());
  if (j.contains("ood") && j.at("ood").is_object())
    for (const auto& [column, loss] : j.at("ood").items())
      if (loss.is_number()) r.ood[column] = loss.get<double>();
  r.seconds = number_of(j, "seconds");
  return r;
}

void write_job_result(const std::string& job_dir, const JobResult& r) {
  json j = {{"status", r.status},
            {"val_loss", number_or_null(r.val_loss)},
            {"val_loss_smoothed", number_or_null(r.val_loss_smoothed)},
            {"ood", r.ood},
            {"val_curve", r.val_curve},
            {"seconds", number_or_null(r.seconds)}};
  if (!r.reason.empty()) j["reason"] = r.reason;
  write_file_atomic(job_dir + "/result.json", j.dump(2) + "\n");
}

double smoothed_final(const train::MetricSeries& c) {
  const size_t n = c.values.size();
  if (n == 0) return NAN;
  if (n < 3) return c.values.back();
  const size_t m = std::max<size_t>(3, (n + 3) / 4);
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = n - m; i < n; ++i) {
    const double x = c.steps[i], y = c.values[i];
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double k = static_cast<double>(m);
  const double slope = (k * sxy - sx * sy) / (k * sxx - sx * sx);
  const double mean_x = sx / k, mean_y = sy / k;
  return mean_y + slope * (c.steps.back() - mean_x);
}

std::string results_csv(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                        const std::vector<std::string>& ood_columns) {
  std::string out =
      "job,arm,target_params,params,params_total,hidden,layers,tokens,tokens_per_param,lr,"
      "batch_size,seed,steps,flops_6nd,flops_exact,val_loss,val_loss_smoothed,";
  for (const std::string& c : ood_columns) out += c + ",";
  out += "seconds,status\n";
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const JobResult& r = results[i];
    out += strprintf("%s,%s,%.9g,%lld,%lld,%lld,%lld,%lld,%.6g,%.9g,%lld,%lld,%lld,%.6e,%.6e,",
                     j.id.c_str(), j.arm.c_str(), j.target, static_cast<long long>(j.shape.params),
                     static_cast<long long>(j.shape.params_total),
                     static_cast<long long>(j.shape.hidden), static_cast<long long>(j.shape.layers),
                     static_cast<long long>(j.tokens),
                     static_cast<double>(j.tokens) / static_cast<double>(j.shape.params), j.lr,
                     static_cast<long long>(j.batch_size), static_cast<long long>(j.seed),
                     static_cast<long long>(j.steps), j.flops_6nd, j.flops_exact);
    out += csv_number(r.val_loss) + "," + csv_number(r.val_loss_smoothed) + ",";
    for (const std::string& c : ood_columns) {
      const auto it = r.ood.find(c);
      out += csv_number(it == r.ood.end() ? NAN : it->second) + ",";
    }
    out += csv_number(r.seconds) + "," + (r.ended() ? r.status : std::string("pending")) + "\n";
  }
  return out;
}

}  // namespace k3::sweep
