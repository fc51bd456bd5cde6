#include "k3/kernels/rope.h"

#include <cmath>
#include <numbers>

#include "k3/base/error.h"

namespace k3::kernels {

std::vector<double> rope_frequencies(int64_t d, double theta, const RopeScaling& s) {
  K3_CHECK(d > 0 && d % 2 == 0, "rotary embeddings need an even, positive head size, got ", d);
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    double fi = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    if (s.factor > 0) {
      const double original = static_cast<double>(s.original_max_positions);
      const double wavelength = 2 * std::numbers::pi / fi;
      if (wavelength > original / s.low_freq_factor) {
        fi /= s.factor;
      } else if (wavelength >= original / s.high_freq_factor) {
        const double smooth =
            (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        fi = (1 - smooth) * fi / s.factor + smooth * fi;
      }
    }
    f[static_cast<size_t>(i)] = fi;
  }
  return f;
}

namespace {

// Each row's cosines and sines once, then every head turned by them: sign −1 for the inverse.
void rotate(const RopeLayout& l, const double* freqs, const int64_t* positions, float* x,
            double sign) {
  const int64_t half = l.d / 2;
#pragma omp parallel if (l.rows * l.heads * l.d > (1 << 15))
  {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    float *c = cs.data(), *s = cs.data() + half;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < l.rows; ++r) {
      const double p = static_cast<double>(positions[r]);
      for (int64_t i = 0; i < half; ++i) {
        const double a = p * freqs[i];
        c[i] = static_cast<float>(std::cos(a));
        s[i] = static_cast<float>(sign * std::sin(a));
      }
      for (int64_t h = 0; h < l.heads; ++h) {
        float *lo = x + r * l.ld_row + h * l.ld_head, *hi = lo + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = lo[i], b = hi[i];
          lo[i] = a * c[i] - b * s[i];
          hi[i] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

}  // namespace

void rope_forward(const RopeLayout& l, const double* freqs, const int64_t* positions, float* x) {
  rotate(l, freqs, positions, x, 1.0);
}

void rope_backward(const RopeLayout& l, const double* freqs, const int64_t* positions, float* dy) {
  rotate(l, freqs, positions, dy, -1.0);
}

}  // namespace k3::kernels
