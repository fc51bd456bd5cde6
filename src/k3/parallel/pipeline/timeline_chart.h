// Pipeline timelines drawn: a row per rank, a bar per node (forward, backward, weight gradient,
// filler), the planned step above and, when given, a measured one below.
#pragma once

#include <string>

#include "k3/base/svg_plot.h"
#include "k3/parallel/pipeline/simulate.h"

namespace k3::parallel::pipeline {

// "interleaved 1F1B, pp 4 × vp 2, 8 micro-batches in groups of 4"
std::string describe(const ScheduleShape& s);

// `measured` may be null. Its times are seconds; the plan's are unit costs.
GanttChart timeline_chart(const Schedule& s, const Timeline& planned, const Timeline* measured);

}  // namespace k3::parallel::pipeline
