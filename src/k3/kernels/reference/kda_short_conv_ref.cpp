#include <cmath>
#include <vector>

#include "k3/kernels/kda/reference.h"
#include "k3/kernels/kda/sequences.h"

namespace k3::ref::kda {

using kernels::kda::ShortConvShape;

// The inputs of one sequence extended to the left by its window: ext[e][c] for e in [0, K−1+len),
// e = K−1 being the sequence's first token.
template <typename T>
static std::vector<T> extended(const ShortConvShape& s, const T* x, const T* window,
                               kernels::kda::SequenceRange seq) {
  const int64_t W = s.K - 1;
  std::vector<T> ext(static_cast<size_t>((W + seq.length) * s.C), T(0));
  if (window)
    for (int64_t i = 0; i < W * s.C; ++i) ext[static_cast<size_t>(i)] = window[i];
  for (int64_t i = 0; i < seq.length * s.C; ++i)
    ext[static_cast<size_t>(W * s.C + i)] = x[seq.begin * s.C + i];
  return ext;
}

template <typename T>
void short_conv_forward(const ShortConvShape& s, const T* x, const T* w, const T* window_in, T* y,
                        T* window_out) {
  const int64_t W = s.K - 1;
  for (int64_t n = 0; n < kernels::kda::num_sequences(s.B, s.doc_starts); ++n) {
    const auto seq = kernels::kda::sequence_range(s.T, s.doc_starts, n);
    const auto ext = extended(s, x, window_in ? window_in + n * W * s.C : nullptr, seq);
    for (int64_t t = 0; t < seq.length; ++t)
      for (int64_t c = 0; c < s.C; ++c) {
        T z = 0;
        for (int64_t j = 0; j < s.K; ++j)
          z += w[c * s.K + j] * ext[static_cast<size_t>((t + j) * s.C + c)];
        y[(seq.begin + t) * s.C + c] = z / (T(1) + std::exp(-z));
      }
    if (window_out)
      for (int64_t i = 0; i < W * s.C; ++i)
        window_out[n * W * s.C + i] = ext[static_cast<size_t>(seq.length * s.C + i)];
  }
}

template <typename T>
void short_conv_backward(const ShortConvShape& s, const T* x, const T* w, const T* window_in,
                         const T* dy, const T* dwindow_out, T* dx, T* dw, T* dwindow_in) {
  const int64_t W = s.K - 1;
  for (int64_t n = 0; n < kernels::kda::num_sequences(s.B, s.doc_starts); ++n) {
    const auto seq = kernels::kda::sequence_range(s.T, s.doc_starts, n);
    const auto ext = extended(s, x, window_in ? window_in + n * W * s.C : nullptr, seq);
    std::vector<T> dext(ext.size(), T(0));
    for (int64_t t = 0; t < seq.length; ++t)
      for (int64_t c = 0; c < s.C; ++c) {
        T z = 0;
        for (int64_t j = 0; j < s.K; ++j)
          z += w[c * s.K + j] * ext[static_cast<size_t>((t + j) * s.C + c)];
        const T sg = T(1) / (T(1) + std::exp(-z));
        const T dz = dy[(seq.begin + t) * s.C + c] * sg * (T(1) + z * (T(1) - sg));
        for (int64_t j = 0; j < s.K; ++j) {
          const size_t e = static_cast<size_t>((t + j) * s.C + c);
          dw[c * s.K + j] += dz * ext[e];
          dext[e] += dz * w[c * s.K + j];
        }
      }
    if (dwindow_out)
      for (int64_t i = 0; i < W * s.C; ++i)
        dext[static_cast<size_t>(seq.length * s.C + i)] += dwindow_out[n * W * s.C + i];
    for (int64_t i = 0; i < seq.length * s.C; ++i)
      dx[seq.begin * s.C + i] = dext[static_cast<size_t>(W * s.C + i)];
    if (dwindow_in)
      for (int64_t i = 0; i < W * s.C; ++i)
        dwindow_in[n * W * s.C + i] = dext[static_cast<size_t>(i)];
  }
}

#define K3_INSTANTIATE(T)                                                                      \
  template void short_conv_forward<T>(const ShortConvShape&, const T*, const T*, const T*, T*, \
                                      T*);                                                     \
  template void short_conv_backward<T>(const ShortConvShape&, const T*, const T*, const T*,    \
                                       const T*, const T*, T*, T*, T*);
K3_INSTANTIATE(float)
K3_INSTANTIATE(double)
#undef K3_INSTANTIATE

}  // namespace k3::ref::kda
