// The drawing of a fitted scaling law as one SVG: iso-loss contours in the (N, D) plane with the
// compute-optimal frontier and the data points (form nd), above the loss against compute C = 6 N D
// of the data and of the fit.
#pragma once

#include <string>

#include "k3/scaling/scaling_csv.h"
#include "k3/scaling/scaling_law.h"

namespace k3::scaling {

std::string render_fit_svg(const ScalingLaw& law, const ScalingRuns& runs,
                           const std::string& title);

}  // namespace k3::scaling
