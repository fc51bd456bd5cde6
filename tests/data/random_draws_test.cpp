#include "k3/data/random_draws.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace k3::data {

TEST(RandomDraws, ReplaysFromKeyAndStream) {
  RandomDraws a(7, 3), b(7, 3), other(7, 4);
  int same_as_other = 0;
  for (int i = 0; i < 100; ++i) {
    const uint32_t x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    same_as_other += x == other.next_u32();
  }
  EXPECT_LT(same_as_other, 2);
}

TEST(RandomDraws, BelowIsUniform) {
  RandomDraws draws(1, 0);
  const int n = 6, samples = 600000;
  std::vector<int> counts(n, 0);
  for (int i = 0; i < samples; ++i) ++counts[draws.below(n)];
  for (int c : counts) EXPECT_NEAR(c, samples / n, 1500);  // about 5 standard deviations
  EXPECT_EQ(draws.below(1), 0u);
  const uint64_t big = (uint64_t{1} << 40) + 3;
  for (int i = 0; i < 1000; ++i) EXPECT_LT(draws.below(big), big);
}

}  // namespace k3::data
