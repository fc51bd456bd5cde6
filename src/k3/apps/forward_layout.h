// The options of the commands that only run the model forward (eval, sample, bench decode).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}
namespace k3::dist {
struct ParallelDims;
}
namespace k3::model {
class Model;
}

namespace k3::apps {

// The layout of such a command under a launcher: --tp ranks split the model (0: every rank of the
// job), and the job's other ranks form dp copies of it. Refuses a --tp that does not divide the
// job, in one line.
void add_tp_option(CLI::App* cmd, int64_t& tp);
dist::ParallelDims forward_dims(int64_t tp, int world_size);
// The --precision option: the matrix products' precision, fp32 or bf16 (empty: the checkpoint's
// train.precision, fp32 for a bare model), applied to MODEL.
void add_precision_option(CLI::App* cmd, std::string& precision);
void apply_precision(model::Model& model, const std::string& precision);

}  // namespace k3::apps
