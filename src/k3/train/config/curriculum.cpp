#include "k3/train/config/curriculum.h"

#include <cmath>
#include <string>

#include "k3/base/error.h"

namespace k3::train {
namespace {

std::string phase_name(int i) { return "curriculum[" + std::to_string(i) + "]"; }

}  // namespace

std::vector<int64_t> phase_ends(const RunConfig& config) {
  std::vector<int64_t> ends;
  double sum = 0;
  for (const CurriculumPhase& p : config.curriculum) {
    sum += p.share;
    ends.push_back(std::llround(sum * static_cast<double>(config.train.steps)));
  }
  if (!ends.empty()) ends.back() = config.train.steps;
  return ends;
}

int phase_at(const RunConfig& config, int64_t step) {
  const std::vector<int64_t> ends = phase_ends(config);
  for (size_t i = 0; i < ends.size(); ++i)
    if (step < ends[i]) return static_cast<int>(i);
  return static_cast<int>(ends.size()) - 1;
}

RunConfig phase_config(const RunConfig& config, int phase) {
  if (phase < 0) return config;
  const CurriculumPhase& p = config.curriculum.at(static_cast<size_t>(phase));
  RunConfig out = config;
  out.data.seq_len = p.seq_len;
  out.data.seed = config.data.seed + phase;
  out.train.batch_size = config.train.batch_size * config.data.seq_len / p.seq_len;
  for (const auto& [key, value] : p.settings) {
    try {
      apply_override(out, key + "=" + value);
    } catch (const Error& e) {
      throw Error(e.message(), ErrorContext{"", phase_name(phase) + "." + key, -1});
    }
  }
  return out;
}

void check_curriculum(const RunConfig& config) {
  if (config.curriculum.empty()) return;
  double sum = 0;
  for (const CurriculumPhase& p : config.curriculum) sum += p.share;
  K3_CHECK_CTX(std::abs(sum - 1) < 1e-9, (ErrorContext{"", "curriculum", -1}),
               "the phases' shares sum to ", sum, ", expected 1");
  const int64_t tokens = config.train.batch_size * config.data.seq_len;
  const std::vector<int64_t> ends = phase_ends(config);
  int64_t start = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    const CurriculumPhase& p = config.curriculum[i];
    const int n = static_cast<int>(i);
    K3_CHECK_CTX(ends[i] > start, (ErrorContext{"", phase_name(n) + ".share", -1}), "share ",
                 p.share, " of ", config.train.steps, " steps is no step");
    K3_CHECK_CTX(tokens % p.seq_len == 0, (ErrorContext{"", phase_name(n) + ".seq_len", -1}),
                 "seq_len ", p.seq_len, " does not divide the micro-batch's ", tokens,
                 " tokens (train.batch_size x data.seq_len), which every phase keeps");
    phase_config(config, n);  // its settings apply
    start = ends[i];
  }
}

}  // namespace k3::train
