#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"

namespace k3 {

TEST(Error, PrintsContext) {
  Error e("expected a positive value", ErrorContext{"run.toml", "train.steps", 3});
  EXPECT_EQ(std::string(e.what()), "file run.toml, field train.steps, rank 3: expected a positive value");
  Error plain("boom");
  EXPECT_EQ(std::string(plain.what()), "boom");
  EXPECT_EQ(std::string(plain.with_file("a.json").what()), "file a.json: boom");
}

TEST(Error, CheckMacroThrows) {
  auto f = [](int x) { K3_CHECK(x > 0, "x must be positive, got ", x); };
  EXPECT_NO_THROW(f(1));
  try {
    f(-2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "x must be positive, got -2");
  }
}

// Known-answer vectors from the Random123 distribution (Philox4x32-10).
TEST(Philox, KnownAnswers) {
  Philox4 zero = philox4x32({0, 0, 0, 0}, 0);
  EXPECT_EQ(zero, (Philox4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  Philox4 ones = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffffffffffull);
  EXPECT_EQ(ones, (Philox4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  Philox4 pi = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          (uint64_t{0x299f31d0u} << 32) | 0xa4093822u);
  EXPECT_EQ(pi, (Philox4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, ElementsAreIndependentOfRange) {
  const uint64_t seed = 42, stream = stream_of("model.layers.0.mlp.up_proj.weight");
  std::vector<float> all(1000), part(300);
  fill_normal(all.data(), 1000, seed, stream, 0, 0.f, 1.f);
  fill_normal(part.data(), 300, seed, stream, 500, 0.f, 1.f);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(all[500 + i], part[i]);
}

TEST(Philox, Moments) {
  const int64_t n = 1 << 20;
  std::vector<float> u(n), z(n);
  fill_uniform(u.data(), n, 7, stream_of("u"), 0, 0.f, 1.f);
  fill_normal(z.data(), n, 7, stream_of("z"), 0, 0.f, 1.f);
  double su = 0, sz = 0, sz2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(u[i] > 0 && u[i] < 1);
    su += u[i];
    sz += z[i];
    sz2 += double(z[i]) * z[i];
  }
  EXPECT_NEAR(su / n, 0.5, 2e-3);
  EXPECT_NEAR(sz / n, 0.0, 5e-3);
  EXPECT_NEAR(sz2 / n, 1.0, 5e-3);
  EXPECT_NE(stream_of("a"), stream_of("b"));
}

TEST(Arena, AlignsRewindsAndRefusesOverflow) {
  Arena a(1 << 20);
  auto* p = a.allocate(3);
  auto* q = a.allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  size_t m = a.mark();
  {
    ArenaScope scope(a);
    a.allocate(1000);
    EXPECT_GT(a.used(), m);
  }
  EXPECT_EQ(a.used(), m);
  EXPECT_THROW(a.allocate(2 << 20), Error);
  EXPECT_GE(a.peak(), 1000u);
}

// Regions of one mapping: disjoint, each bounded by its own capacity, reset on their own.
TEST(ArenaRegions, RegionsAreDisjointAndResetApart) {
  ArenaRegions regions(1000, 3);  // rounded up to 1024 bytes each
  ASSERT_EQ(regions.count(), 3);
  char* first[3];
  for (int i = 0; i < 3; ++i) {
    first[i] = static_cast<char*>(regions[i].allocate(1024));
    std::memset(first[i], 'a' + i, 1024);
    EXPECT_THROW(regions[i].allocate(1), Error);
  }
  EXPECT_EQ(first[1] - first[0], 1024);
  EXPECT_EQ(first[2] - first[1], 1024);
  regions[1].reset();
  EXPECT_EQ(regions[1].allocate(1024), first[1]);  // reused, not remapped
  EXPECT_EQ(first[0][1023], 'a');
  EXPECT_EQ(first[2][0], 'c');
  EXPECT_EQ(regions[0].used(), 1024u);
  EXPECT_THROW(regions[3], std::out_of_range);
}

}  // namespace k3
