// A sweep file (`k3lab sweep SWEEP.toml`, docs/scaling.md): model families ("arms") at a list of
// target sizes, token budgets, learning rates, batch sizes and seeds, every combination one
// training job. Relative paths are read next to the sweep file, then in the working directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace k3::sweep {

// One model family or training recipe compared in the sweep: its preset model (HF-style JSON,
// scaled to each size) and run-config settings of its own, applied after the sweep's.
struct Arm {
  std::string name;
  std::string preset;
  std::vector<double> sizes;  // its own target sizes; empty: the sweep's
  std::vector<double> lrs;    // its own learning rates; empty: the sweep's
  std::vector<std::pair<std::string, std::string>> settings;  // "section.key" -> TOML value
};

struct SweepSpec {
  std::string path;  // the sweep file, for messages
  std::string name;  // its stem: the results are OUT/NAME.csv, the comparisons OUT/NAME.*
  std::string out;   // the sweep directory: jobs/ (sweep files may share one), results
  // Jobs at once and train.threads of each; none: "auto", chosen for the machine (split.h).
  std::optional<int64_t> parallel, threads;
  std::vector<double> sizes;             // target active matmul parameters
  std::vector<double> tokens_per_param;  // token budgets D = r·N (or, exclusively, flops)
  std::vector<double> flops;             // compute budgets C: D = C / (6 N)
  std::vector<double> lrs;
  std::vector<int64_t> batch_sizes;  // empty: the run config's train.batch_size
  std::vector<int64_t> seeds;        // model.seed values; empty: the run config's
  std::vector<double> seed_sizes;  // the sizes that run every seed; empty: all (others: the first)
  int64_t evals = 10;              // validation evaluations per job (the last at its end)
  std::string base_config;         // a run-config TOML every job starts from ("": defaults)
  std::vector<std::pair<std::string, std::string>> settings;  // every job's "section.key" -> value
  // Texts every finished job is also scored on, each reported as the column "ood_" + its stem.
  std::vector<std::string> val_data;
  int64_t val_batches = 0;  // their validation batches (0: all)
  std::vector<Arm> arms;
};

// The results column of an out-of-distribution text: "ood_" + the file's stem.
std::string ood_column(const std::string& val_data_path);

// Parses the sweep file; every error names the file and the key.
SweepSpec parse_sweep_spec(const std::string& toml_text, const std::string& path);
SweepSpec load_sweep_spec(const std::string& path);

}  // namespace k3::sweep
