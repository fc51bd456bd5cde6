#include "k3/train/observe/expert_load.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/base/log.h"

namespace k3::train {
namespace {

using nlohmann::json;

// A file whose last write was cut short by a crash ends mid-line; the next record must not be
// glued to that fragment.
bool ends_mid_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return false;
  in.seekg(-1, std::ios::end);
  return in.get() != '\n';
}

model::DispatchStats parse_ranks(const json& j, const ErrorContext& ctx, int64_t line,
                                 const std::string& layer) {
  const auto counts = [&](const char* name) {
    K3_CHECK_CTX(j.is_object() && j.contains(name) && j[name].is_array(), ctx, "line ", line,
                 ", layer ", layer, ": \"ranks\" needs an array \"", name, "\"");
    std::vector<int64_t> out;
    for (const json& v : j[name]) {
      K3_CHECK_CTX(v.is_number_unsigned(), ctx, "line ", line, ", layer ", layer, ": ", name,
                   " must hold non-negative integers, found ", v.dump());
      out.push_back(v.get<int64_t>());
    }
    return out;
  };
  const auto count = [&](const char* name) {
    K3_CHECK_CTX(j.contains(name) && j[name].is_number_unsigned(), ctx, "line ", line, ", layer ",
                 layer, ": \"ranks\" needs a count \"", name, "\"");
    return j[name].get<int64_t>();
  };
  model::DispatchStats d;
  d.home_rows = counts("home_rows");
  d.rows = counts("rows");
  K3_CHECK_CTX(d.rows.size() == d.home_rows.size(), ctx, "line ", line, ", layer ", layer, ": ",
               d.rows.size(), " ranks' rows but ", d.home_rows.size(), " ranks' home rows");
  if (j.contains("plan_loads")) {  // MoonEP: one array of loads per micro-batch
    K3_CHECK_CTX(j["plan_loads"].is_array(), ctx, "line ", line, ", layer ", layer,
                 ": \"plan_loads\" must be an array of per-micro-batch loads");
    for (const json& micro : j["plan_loads"]) {
      K3_CHECK_CTX(micro.is_array(), ctx, "line ", line, ", layer ", layer,
                   ": \"plan_loads\" must hold one array of loads per micro-batch");
      for (const json& v : micro) {
        K3_CHECK_CTX(v.is_number_unsigned(), ctx, "line ", line, ", layer ", layer,
                     ": plan_loads must hold non-negative integers, found ", v.dump());
        d.plan_loads.push_back(v.get<int64_t>());
      }
    }
  }
  d.replicas = count("replicas");
  d.overflow = count("overflow");
  d.bytes = count("bytes");
  return d;
}

ExpertLoadRecord parse_record(const json& j, const std::string& path, int64_t line) {
  const ErrorContext ctx{path, "", -1};
  K3_CHECK_CTX(j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                   j.contains("layers") && j["layers"].is_object(),
               ctx, "line ", line, ": expected {\"step\": <integer>, \"layers\": {...}}");
  ExpertLoadRecord r;
  r.step = j["step"].get<int64_t>();
  for (const auto& [key, layer] : j["layers"].items()) {
    const bool numbered =
        !key.empty() && key.size() < 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    K3_CHECK_CTX(numbered && layer.is_object() && layer.contains("tokens") &&
                     layer["tokens"].is_number_unsigned() && layer.contains("load") &&
                     layer["load"].is_array(),
                 ctx, "line ", line, ", layer \"", key,
                 "\": expected a layer number with {\"tokens\": <count>, \"load\": [<counts>]}");
    std::vector<int64_t> load;
    for (const json& v : layer["load"]) {
      K3_CHECK_CTX(v.is_number_unsigned(), ctx, "line ", line, ", layer ", key,
                   ": load counts must be non-negative integers, found ", v.dump());
      load.push_back(v.get<int64_t>());
    }
    r.layers[std::stoll(key)] =
        model::ExpertLoadStats::of(std::move(load), layer["tokens"].get<int64_t>());
    if (layer.contains("ranks"))
      r.dispatch[std::stoll(key)] = parse_ranks(layer["ranks"], ctx, line, key);
  }
  return r;
}

// Indices of at most max_columns of n records, evenly spaced, first and last included.
std::vector<size_t> pick_columns(size_t n, size_t max_columns) {
  std::vector<size_t> picked;
  const size_t m = std::min(n, std::max<size_t>(max_columns, 2));
  for (size_t i = 0; i < m; ++i) picked.push_back(m == n ? i : i * (n - 1) / (m - 1));
  return picked;
}

int heatmap_height(size_t rows) {
  return static_cast<int>(std::clamp<size_t>(120 + 16 * rows, 260, 1400));
}

}  // namespace

std::string expert_load_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "expert_load.jsonl").string();
}

void append_expert_load(const std::string& run_dir, int64_t step,
                        const std::map<int64_t, model::ExpertLoadStats>& layers,
                        const std::map<int64_t, model::DispatchStats>& dispatch) {
  std::filesystem::create_directories(run_dir);
  const std::string path = expert_load_path(run_dir);
  nlohmann::ordered_json record{{"step", step}, {"layers", nlohmann::ordered_json::object()}};
  for (const auto& [layer, st] : layers)
    record["layers"][std::to_string(layer)] = {{"tokens", st.tokens}, {"load", st.load},
                                               {"maxvio", st.maxvio}, {"min", st.min_load},
                                               {"max", st.max_load},  {"idle", st.idle}};
  for (const auto& [layer, d] : dispatch) {
    auto& ranks = record["layers"][std::to_string(layer)]["ranks"];
    ranks = {{"home_rows", d.home_rows},
             {"rows", d.rows},
             {"replicas", d.replicas},
             {"overflow", d.overflow},
             {"bytes", d.bytes}};
    if (d.plan_loads.empty()) continue;
    const auto it = layers.find(layer);
    K3_CHECK(it != layers.end() && !it->second.load.empty(), "expert load: layer ", layer,
             " has dispatch figures but no loads");
    const size_t experts = it->second.load.size();
    nlohmann::ordered_json micro = nlohmann::ordered_json::array();
    for (size_t at = 0; at < d.plan_loads.size(); at += experts)
      micro.push_back(
          std::vector<int64_t>(d.plan_loads.begin() + static_cast<ptrdiff_t>(at),
                               d.plan_loads.begin() + static_cast<ptrdiff_t>(at + experts)));
    ranks["plan_loads"] = micro;
  }
  const std::string line = (ends_mid_line(path) ? "\n" : "") + record.dump() + "\n";
  std::ofstream out(path, std::ios::app | std::ios::binary);
  K3_CHECK_CTX(out, (ErrorContext{path, "", -1}), "cannot open for appending");
  out << line;
  out.flush();
  K3_CHECK_CTX(out, (ErrorContext{path, "", -1}), "cannot write");
}

std::vector<ExpertLoadRecord> read_expert_load(const std::string& path) {
  K3_CHECK_CTX(file_exists(path), (ErrorContext{path, "", -1}),
               "no expert-load records: training a MoE model writes them");
  const std::string text = read_file(path);
  std::vector<ExpertLoadRecord> records;
  int64_t number = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    const std::string_view line = std::string_view(text).substr(begin, end - begin);
    begin = end + 1;
    ++number;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      log_warn("expert load: skipping line ", number, " of ", path, ": not JSON");
      continue;
    }
    ExpertLoadRecord r = parse_record(j, path, number);
    while (!records.empty() && records.back().step >= r.step) records.pop_back();
    records.push_back(std::move(r));
  }
  return records;
}

Heatmap maxvio_heatmap(const std::vector<ExpertLoadRecord>& records, size_t max_columns) {
  std::set<int64_t> layers;
  for (const ExpertLoadRecord& r : records)
    for (const auto& entry : r.layers) layers.insert(entry.first);
  Heatmap h;
  h.title = "Expert load imbalance per MoE layer";
  h.x_label = "step";
  h.y_label = "layer";
  h.value_label = "maxvio = max load / mean load - 1";
  h.height = heatmap_height(layers.size());
  const std::vector<size_t> columns = pick_columns(records.size(), max_columns);
  for (size_t c : columns) h.column_labels.push_back(std::to_string(records[c].step));
  for (int64_t layer : layers) {
    h.row_labels.push_back(std::to_string(layer));
    std::vector<double>& row = h.values.emplace_back();
    for (size_t c : columns) {
      auto it = records[c].layers.find(layer);
      row.push_back(it == records[c].layers.end() ? NAN : it->second.maxvio);
    }
  }
  return h;
}

Heatmap layer_load_heatmap(const std::vector<ExpertLoadRecord>& records, int64_t layer,
                           size_t max_columns) {
  size_t experts = 0;
  for (const ExpertLoadRecord& r : records)
    if (auto it = r.layers.find(layer); it != r.layers.end())
      experts = std::max(experts, it->second.load.size());
  K3_CHECK_CTX(experts > 0, (ErrorContext{"", "--layer", -1}), "no expert-load records for layer ",
               layer);
  Heatmap h;
  h.title = "Expert load of layer " + std::to_string(layer);
  h.x_label = "step";
  h.y_label = "expert";
  h.value_label = "load / mean load";
  h.height = heatmap_height(experts);
  const std::vector<size_t> columns = pick_columns(records.size(), max_columns);
  h.values.assign(experts, {});
  for (size_t e = 0; e < experts; ++e) h.row_labels.push_back(std::to_string(e));
  for (size_t c : columns) {
    h.column_labels.push_back(std::to_string(records[c].step));
    auto it = records[c].layers.find(layer);
    const std::vector<int64_t> none;
    const std::vector<int64_t>& load = it == records[c].layers.end() ? none : it->second.load;
    double total = 0;
    for (int64_t l : load) total += static_cast<double>(l);
    const double mean = total / static_cast<double>(experts);
    for (size_t e = 0; e < experts; ++e)
      h.values[e].push_back(e < load.size() && total > 0 ? static_cast<double>(load[e]) / mean
                                                         : NAN);
  }
  return h;
}

}  // namespace k3::train
