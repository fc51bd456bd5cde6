// Causal depthwise short convolution followed by SiLU (math §3, step 1), per channel c:
//   y[t, c] = silu(Σ_{j<K} w[c, j] · x[t − (K−1) + j, c])
// where inputs before a sequence's first token come from its carry-in window (zeros when none).
// The window of a sequence holds its last K−1 inputs, oldest first, so a sequence can be continued
// (prefill then decode, or the next piece of a long document).
//
// Layouts: x, y [B, T, C]; w [C, K] (the checkpoint's [C, 1, K]); windows [N, K−1, C] with N the
// number of sequences (sequences.h: batch rows, or packed documents when doc_starts is given).
#pragma once

#include <cstdint>
#include <span>

namespace k3::kernels::kda {

struct ShortConvShape {
  int64_t B = 1, T = 1, C = 1, K = 4;
  std::span<const int64_t> doc_starts;
};

// window_in may be null (zeros); window_out may be null (not wanted) or equal window_in.
void short_conv_forward(const ShortConvShape& s, const float* x, const float* w,
                        const float* window_in, float* y, float* window_out);
// dy is the gradient of y, dwindow_out (may be null) that of window_out. dx is written, dw [C, K]
// accumulated, dwindow_in (may be null) written.
void short_conv_backward(const ShortConvShape& s, const float* x, const float* w,
                         const float* window_in, const float* dy, const float* dwindow_out,
                         float* dx, float* dw, float* dwindow_in);

}  // namespace k3::kernels::kda
