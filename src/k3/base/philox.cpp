#include "k3/base/philox.h"

#include <cmath>

namespace k3 {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline float to_open_unit(uint32_t x) {
  // 24 high bits, centred in their bin: never exactly 0 or 1.
  return (static_cast<float>(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

inline Philox4 block(uint64_t seed, uint64_t stream, uint64_t counter_index) {
  Philox4 ctr = {static_cast<uint32_t>(counter_index), static_cast<uint32_t>(counter_index >> 32),
                 static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return philox4x32(ctr, seed);
}

}  // namespace

Philox4 philox4x32(Philox4 c, uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

uint64_t stream_of(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// Element i takes word i%4 of block i/4 for a uniform, and words pair (i%2) of block i/2 for a normal.
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return to_open_unit(block(seed, stream, index / 4)[index % 4]);
}

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 b = block(seed, stream ^ 0x6E6F726D616C0000ull, index / 2);  // distinct from uniform draws
  int w = static_cast<int>(index % 2) * 2;
  double u1 = to_open_unit(b[w]), u2 = to_open_unit(b[w + 1]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first, float lo,
                  float hi) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    out[i] = lo + (hi - lo) * philox_uniform(seed, stream, first + static_cast<uint64_t>(i));
}

void fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first, float mean,
                 float std) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    out[i] = mean + std * philox_normal(seed, stream, first + static_cast<uint64_t>(i));
}

}  // namespace k3
