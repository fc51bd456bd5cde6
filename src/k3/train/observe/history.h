// RUN_DIR/history.jsonl: what happened to a run, one JSON object per line: its start, each
// resume (the checkpoint used, those skipped as unusable, the configuration changes made), each
// stop on a signal. The configuration a run started with stays untouched in RUN_DIR/config.toml.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace k3::train {

// Appends EVENT (a JSON object; "time" is added, in UTC) as one line, flushed to disk.
void append_history(const std::string& run_dir, nlohmann::json event);

}  // namespace k3::train
