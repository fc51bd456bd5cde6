// A run's activation policies (the [activation] section, docs/activations.md): the manager
// configured from them; in budget mode, the profiling pass before the first step and the plan
// chosen from it; and every step's accounting for metrics.jsonl, measured beside predicted.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "k3/activation/budget.h"
#include "k3/activation/manager.h"
#include "k3/dist/grid.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

// The rules of the section (policy as the default; an error names the field).
activation::PolicyRules activation_rules(const ActivationSection& a);
activation::Granularity activation_granularity(const ActivationSection& a);
// Memory copy bandwidth (bytes a second), the best of three copies of 64 MiB whose pages are
// touched: the cost model of offloading.
double measure_copy_bandwidth();

class ActivationRun {
 public:
  // Configures `acts`; with offload_to = peer, lends the peer window (collective over the world).
  ActivationRun(const ActivationSection& config, activation::ActivationManager& acts,
                const dist::ProcessGrid& grid);

  // Budget mode before its plan exists: the step must first run a profiling pass.
  bool needs_profile() const { return budget_ > 0 && !planned_; }
  // Around the profiling pass (one forward and backward that records no statistics, with every
  // tensor no rule fixes recomputed): then plans (refusing a budget too small) and configures.
  void begin_profile();
  std::string plan(size_t arena_peak);  // a line saying what was chosen

  // Around each step's forward and backward; record() adds its figures to a metrics record.
  void begin_step();
  void end_step(size_t arena_peak);
  void record(nlohmann::json& rec) const;
  // The last step's peak: its arena's beside what the manager stored.
  size_t peak_bytes() const { return measured_arena_ + step_stats_.stored_peak; }

  // The --profile table: the policy of each tensor class, bytes saved, time spent.
  std::string report() const;

 private:
  activation::StepCosts costs(size_t arena_peak) const;

  ActivationSection config_;
  activation::ActivationManager& acts_;
  const dist::ProcessGrid& grid_;
  size_t budget_ = 0;
  bool planned_ = false;
  double copy_bandwidth_ = 0;
  // The profile the next step is predicted from (budget mode: the profiling pass's).
  std::vector<activation::SegmentProfile> profile_;
  size_t profile_arena_peak_ = 0;
  std::optional<activation::Prediction> predicted_;  // for the step that just ran
  size_t measured_arena_ = 0;
  activation::ManagerStats step_stats_;
  activation::ManagerStats run_stats_;  // summed over steps, for the report
  int64_t steps_ = 0;
};

}  // namespace k3::train
