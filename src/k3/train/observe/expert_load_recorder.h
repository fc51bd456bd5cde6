// The MoE layers' load after each applied step: per-layer figures in the metrics record
// ("moe.maxvio.LAYER", under expert parallelism "moe.rows_max.LAYER", ...) and the full per-expert
// loads in RUN_DIR/expert_load.jsonl (drawn by `k3lab report`). Under pipeline parallelism each pp
// rank balanced its own stages' layers: they are gathered over pp (a collective), and the lead
// records them all.
#pragma once

#include <string>

#include "k3/dist/grid.h"
#include "k3/train/observe/recorder.h"

namespace k3::train {

class ExpertLoadRecorder : public Recorder {
 public:
  // LEAD writes RUN_DIR/expert_load.jsonl; a model without experts records nothing.
  ExpertLoadRecorder(const dist::ProcessGrid& grid, bool has_experts, std::string run_dir);
  void record(int64_t step, const StepResult& result, nlohmann::json& rec) override;

 private:
  const dist::ProcessGrid& grid_;
  bool has_experts_;
  std::string run_dir_;
};

}  // namespace k3::train
