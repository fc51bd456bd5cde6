#include "k3/kernels/selfcheck.h"

#include <gtest/gtest.h>

namespace k3 {
namespace {

TEST(Selfcheck, EveryKernelPassesForSeveralSeeds) {
  for (uint64_t seed : {1, 2, 3}) {
    const auto results = kernels::run_selfchecks(seed);
    EXPECT_FALSE(results.empty());
    for (const auto& r : results)
      EXPECT_TRUE(r.passed) << r.name << ": error " << r.error << " > tolerance " << r.tolerance
                            << " (seed " << seed << ")";
  }
}

}  // namespace
}  // namespace k3
