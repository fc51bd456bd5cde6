#include "k3/train/config/parallel.h"

#include <sstream>

#include "k3/base/error.h"

namespace k3::train {

dist::ParallelDims parallel_dims(const ParallelSection& p) {
  return {.tp = static_cast<int>(p.tp),
          .cp = static_cast<int>(p.cp),
          .ep = static_cast<int>(p.ep),
          .dp = static_cast<int>(p.dp),
          .pp = static_cast<int>(p.pp),
          .sequence_parallel = p.sequence_parallel,
          .moonep = p.moe_dispatch == "moonep",
          .moonep_slots = static_cast<int>(p.moonep_slots)};
}

model::PipelineSplit pipeline_split(const ParallelSection& p, int64_t layers) {
  const ErrorContext ctx{"", "parallel.pp_layers", -1};
  std::vector<int64_t> counts;
  std::istringstream list(p.pp_layers);
  for (std::string item; std::getline(list, item, ',');) {
    size_t used = 0;
    int64_t n = -1;
    try {
      n = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    K3_CHECK_CTX(n >= 0 && item.find_first_not_of(" ", used) == std::string::npos, ctx, "'",
                 p.pp_layers, "' is not a comma-separated list of layer counts");
    counts.push_back(n);
  }
  try {
    return model::PipelineSplit::make(layers, static_cast<int>(p.pp), static_cast<int>(p.vp),
                                      counts);
  } catch (const Error& e) {
    throw Error(e.message(), ctx);
  }
}

parallel::pipeline::Fillers pipeline_fillers(const ParallelSection& p) {
  using parallel::pipeline::Fillers;
  return p.pp_fillers == "before" ? Fillers::before
         : p.pp_fillers == "none" ? Fillers::none
                                  : Fillers::in_bubbles;
}

parallel::pipeline::ScheduleKind pipeline_schedule(const ParallelSection& p) {
  if (p.pp_schedule == "auto")
    return p.vp > 1 ? parallel::pipeline::ScheduleKind::interleaved
                    : parallel::pipeline::ScheduleKind::one_f_one_b;
  return parallel::pipeline::parse_schedule_kind(p.pp_schedule);
}

nlohmann::json layout_json(const dist::ParallelDims& d, const ParallelSection& p,
                           const model::PipelineSplit& split) {
  nlohmann::json j = {{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp},
                      {"ep", d.ep}, {"cp", d.cp}, {"zero", p.zero}};
  if (d.pp > 1) {
    j["vp"] = split.vp;
    j["pp_layers"] = split.layers;
  }
  return j;
}

}  // namespace k3::train
