// Quick checks of every fast kernel against its reference on random data (`k3lab selfcheck`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::kernels {

struct SelfcheckResult {
  std::string name;
  double error = 0;      // max |fast - reference| / (1 + |reference|)
  double tolerance = 0;
  bool passed = false;
};

std::vector<SelfcheckResult> run_selfchecks(uint64_t seed);

}  // namespace k3::kernels
