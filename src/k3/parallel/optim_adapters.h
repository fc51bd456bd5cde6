// The model as the optimizer sees it. model/ and optim/ do not know each other (the layer map in
// CMakeLists.txt), so the two views the optimizer needs of a model are built here.
#pragma once

#include "k3/model/config.h"
#include "k3/model/params.h"
#include "k3/optim/param_groups.h"
#include "k3/optim/param_set.h"

namespace k3::parallel {

// The parameters this rank holds as named ranges of the flat value and gradient buffers (under
// expert parallelism, the routed experts of other ep ranks are left out: their owners update them).
optim::ParamSet param_set(const model::ParamRegistry& params);
// The head block sizes Per-Head Muon splits projections into (optim/param_groups.h).
optim::HeadSizes head_sizes(const model::ModelConfig& c);

}  // namespace k3::parallel
