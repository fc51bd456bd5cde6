// The --tp and --precision options of the commands that only run the model forward.
#include "k3/apps/forward_layout.h"

#include <CLI/CLI.hpp>

#include "k3/base/error.h"
#include "k3/dist/grid.h"
#include "k3/kernels/gemm.h"
#include "k3/model/model.h"

namespace k3::apps {

void add_tp_option(CLI::App* cmd, int64_t& tp) {
  cmd->add_option("--tp", tp,
                  "Under mpirun: ranks the model is split over (tensor parallelism); 0, the "
                  "default: every rank of the job");
}

dist::ParallelDims forward_dims(int64_t tp, int world_size) {
  if (tp == 0) tp = world_size;
  K3_CHECK_CTX(tp > 0 && world_size % tp == 0, (ErrorContext{"", "--tp", -1}), "--tp ", tp,
               " does not divide the job's ", world_size, " rank", world_size == 1 ? "" : "s");
  return {.tp = static_cast<int>(tp), .dp = world_size / static_cast<int>(tp)};
}

void add_precision_option(CLI::App* cmd, std::string& precision) {
  cmd->add_option("--precision", precision,
                  "Matrix products in fp32 or bf16 (fp32 accumulation); default: the "
                  "checkpoint's train.precision, fp32 for --model");
}

void apply_precision(model::Model& model, const std::string& precision) {
  if (precision.empty()) return;
  const auto p = kernels::parse_precision(precision);
  K3_CHECK_CTX(p.has_value(), (ErrorContext{"", "--precision", -1}), "expected fp32 or bf16, got \"",
               precision, "\"");
  model.set_precision(*p);
}

}  // namespace k3::apps
