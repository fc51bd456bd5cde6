#include "k3/train/observe/metrics.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/base/log.h"

namespace k3::train {
namespace {

using nlohmann::json;

std::optional<json> parse_record(std::string_view line) {
  json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return std::nullopt;
  return record;
}

// The complete lines of TEXT (those ending in a newline), with their line numbers from 1.
template <typename Visit>
void for_each_line(const std::string& text, Visit visit) {
  size_t begin = 0;
  for (int64_t number = 1;; ++number) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) return;
    visit(std::string_view(text).substr(begin, end - begin), number);
    begin = end + 1;
  }
}

// Rewrites PATH with only the records a run resumed at RESUME_STEP has already made.
void drop_records_after(const std::string& path, int64_t resume_step) {
  std::string kept;
  for_each_line(read_file(path), [&](std::string_view line, int64_t number) {
    std::optional<json> record = parse_record(line);
    if (!record) {
      log_warn("metrics: dropping line ", number, " of ", path, ": not a JSON object");
      return;
    }
    auto step = record->find("step");
    if (step != record->end() && step->is_number() && step->get<double>() > resume_step) return;
    kept.append(line);
    kept += '\n';
  });
  write_file_atomic(path, kept);
}

}  // namespace

std::string metrics_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "metrics.jsonl").string();
}

MetricsWriter::MetricsWriter(const std::string& run_dir, int64_t resume_step)
    : path_(metrics_path(run_dir)) {
  std::filesystem::create_directories(run_dir);
  if (resume_step >= 0 && file_exists(path_)) drop_records_after(path_, resume_step);
  out_.open(path_, resume_step >= 0 ? std::ios::app : std::ios::trunc);
  K3_CHECK_CTX(out_, (ErrorContext{path_, "", -1}), "cannot open for writing");
}

void MetricsWriter::write(const json& record) {
  K3_CHECK(record.is_object(), "a metrics record must be a JSON object, got ", record.dump());
  out_ << record.dump() << '\n';
  out_.flush();
  K3_CHECK_CTX(out_, (ErrorContext{path_, "", -1}), "cannot write");
}

std::map<std::string, MetricSeries> read_metrics(const std::string& path) {
  const std::string text = read_file(path);
  std::map<std::string, MetricSeries> series;
  for_each_line(text, [&](std::string_view line, int64_t number) {
    if (line.empty()) return;
    std::optional<json> record = parse_record(line);
    K3_CHECK_CTX(record, (ErrorContext{path, "", -1}), "line ", number, ": not a JSON object");
    auto step = record->find("step");
    if (step == record->end() || !step->is_number()) return;
    for (auto& [name, value] : record->items()) {
      if (name == "step" || !(value.is_number() || value.is_null())) continue;
      MetricSeries& s = series[name];
      s.steps.push_back(step->get<double>());
      s.values.push_back(value.is_null() ? NAN : value.get<double>());
    }
  });
  return series;
}

}  // namespace k3::train
