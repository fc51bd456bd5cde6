// A measured pipeline step in the Chrome trace format (the JSON Perfetto and chrome://tracing
// open, as PyTorch's profiler writes it): one process per pp rank, one complete ("X") event per
// schedule node, in microseconds from the step's start.
#pragma once

#include <nlohmann/json.hpp>

#include "k3/parallel/pipeline/schedule.h"
#include "k3/parallel/pipeline/simulate.h"

namespace k3::parallel::pipeline {

// The trace's events (metadata naming each rank, then the nodes); `pid0` is the first rank's
// process id, so that several traces can share one file.
nlohmann::json timeline_trace_events(const Schedule& s, const Timeline& measured, int pid0 = 0);

}  // namespace k3::parallel::pipeline
