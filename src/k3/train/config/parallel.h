// [parallel] read as the types the rest of k3lab uses, each string parsed here once: the process
// grid's sizes, the pipeline's split of the layers, its schedule and where a vision tower's forward
// runs (docs/pipeline_parallel.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "k3/dist/grid.h"
#include "k3/model/pipeline_split.h"
#include "k3/parallel/pipeline/schedule.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

// The grid's sizes and options (dp, tp, pp, ep, cp; sequence parallelism, MoonEP).
dist::ParallelDims parallel_dims(const ParallelSection& p);
// The pipeline's split of a model of `layers` layers: parallel.pp × parallel.vp virtual stages,
// parallel.pp_layers counts or even (refused in one line naming the field otherwise).
model::PipelineSplit pipeline_split(const ParallelSection& p, int64_t layers);
// parallel.pp_schedule, with "auto" resolved.
parallel::pipeline::ScheduleKind pipeline_schedule(const ParallelSection& p);
// Where a vision tower's forward runs under pp (parallel.pp_fillers).
parallel::pipeline::Fillers pipeline_fillers(const ParallelSection& p);

// The layout as a run's history and checkpoints record it: the grid's sizes and ZeRO stage, and
// under pipeline parallelism the virtual stages and their layers.
nlohmann::json layout_json(const dist::ParallelDims& dims, const ParallelSection& p,
                           const model::PipelineSplit& split);

}  // namespace k3::train
