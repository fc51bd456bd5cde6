#include "k3/tensor/bf16.h"

namespace k3 {

void float_to_bf16(const float* in, uint16_t* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

void bf16_to_float(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

}  // namespace k3
