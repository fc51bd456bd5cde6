#include "k3/kernels/kda/short_conv.h"

#include <algorithm>
#include <vector>

#include "k3/kernels/kda/rows.h"
#include "k3/kernels/kda/sequences.h"

namespace k3::kernels::kda {
namespace {

// Channels are processed in blocks of kBlock, one block per task, all sequences of a block by the
// same thread: dw then sums over tokens in a fixed order whatever the thread count.
constexpr int64_t kBlock = 64;

// Channels [c0, c0 + n) of one task, with the weights transposed to wt[j][i] and thread scratch.
struct Block {
  int64_t c0, n, K, C;
  float *wt, *dw, *z, *zeros;  // [K][kBlock], [K][kBlock], [kBlock], [kBlock]

  Block(const ShortConvShape& s, const float* w, std::vector<float>& scratch, int64_t b)
      : c0(b * kBlock), n(std::min(kBlock, s.C - b * kBlock)), K(s.K), C(s.C) {
    scratch.assign(static_cast<size_t>((2 * K + 2) * kBlock), 0.0f);
    wt = scratch.data();
    dw = wt + K * kBlock;
    z = dw + K * kBlock;
    zeros = z + kBlock;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < K; ++j) wt[j * kBlock + i] = w[(c0 + i) * K + j];
  }

  // This block's inputs at position p of the sequence; p < 0 reads the window [K−1, C] (or zeros).
  const float* input(const float* x, const float* window, SequenceRange seq, int64_t p) const {
    if (p >= 0) return x + (seq.begin + p) * C + c0;
    return window ? window + (p + K - 1) * C + c0 : zeros;
  }

  // z = pre-activation at position t.
  void preactivation(const float* x, const float* window, SequenceRange seq, int64_t t) {
    std::fill(z, z + n, 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const float *wj = wt + j * kBlock, *xj = input(x, window, seq, t - (K - 1) + j);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) z[i] += wj[i] * xj[i];
    }
  }
};

int64_t num_blocks(int64_t C) { return (C + kBlock - 1) / kBlock; }

}  // namespace

void short_conv_forward(const ShortConvShape& s, const float* x, const float* w,
                        const float* window_in, float* y, float* window_out) {
  const int64_t N = num_sequences(s.B, s.doc_starts), W = (s.K - 1) * s.C;
#pragma omp parallel if (s.B * s.T * s.C > 32768)
  {
    std::vector<float> scratch;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < num_blocks(s.C); ++b) {
      Block blk(s, w, scratch, b);
      for (int64_t q = 0; q < N; ++q) {
        const SequenceRange seq = sequence_range(s.T, s.doc_starts, q);
        const float* win = window_in ? window_in + q * W : nullptr;
        for (int64_t t = 0; t < seq.length; ++t) {
          blk.preactivation(x, win, seq, t);
          float* yt = y + (seq.begin + t) * s.C + blk.c0;
#pragma omp simd
          for (int64_t i = 0; i < blk.n; ++i) yt[i] = rows::silu(blk.z[i]);
        }
        // Row j of the new window is input position length − (K−1) + j, which never comes from a
        // window row below j: the copy may run in place.
        if (window_out)
          for (int64_t j = 0; j + 1 < s.K; ++j) {
            const float* src = blk.input(x, win, seq, seq.length - (s.K - 1) + j);
            std::copy(src, src + blk.n, window_out + q * W + j * s.C + blk.c0);
          }
      }
    }
  }
}

// Two passes per sequence. Forward in time: recompute z, dz = dy · silu'(z), accumulate dw, and
// park dz in dx. Then forward again over the positions e of the sequence and its window (e < 0):
// the input at e feeds the outputs e..e+K−1, so its gradient is Σ_m w[K−1−m] · dz[e+m] (plus
// dwindow_out where e is among the last K−1 inputs). Only dz at positions ≥ e is read, so each
// gradient can replace its dz.
void short_conv_backward(const ShortConvShape& s, const float* x, const float* w,
                         const float* window_in, const float* dy, const float* dwindow_out,
                         float* dx, float* dw, float* dwindow_in) {
  const int64_t N = num_sequences(s.B, s.doc_starts), K = s.K, W = (K - 1) * s.C;
#pragma omp parallel if (s.B * s.T * s.C > 32768)
  {
    std::vector<float> scratch;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < num_blocks(s.C); ++b) {
      Block blk(s, w, scratch, b);
      const int64_t c0 = blk.c0, n = blk.n;
      for (int64_t q = 0; q < N; ++q) {
        const SequenceRange seq = sequence_range(s.T, s.doc_starts, q);
        const float* win = window_in ? window_in + q * W : nullptr;
        for (int64_t t = 0; t < seq.length; ++t) {
          blk.preactivation(x, win, seq, t);
          const float* dyt = dy + (seq.begin + t) * s.C + c0;
          float* dzt = dx + (seq.begin + t) * s.C + c0;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            const fast::SigmoidPair sg = fast::sigmoid_pair(blk.z[i]);
            dzt[i] = dyt[i] * sg.s * (1.0f + blk.z[i] * sg.c);
          }
          for (int64_t j = 0; j < K; ++j) {
            const float* xj = blk.input(x, win, seq, t - (K - 1) + j);
            float* dwj = blk.dw + j * kBlock;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) dwj[i] += dzt[i] * xj[i];
          }
        }

        const int64_t last = seq.length - (K - 1);  // first of the positions window_out holds
        for (int64_t e = -(K - 1); e < seq.length; ++e) {
          float* din = blk.z;  // free again: the gradient of the input at e
          std::fill(din, din + n, 0.0f);
          for (int64_t m = std::max<int64_t>(0, -e); m < K && e + m < seq.length; ++m) {
            const float *wm = blk.wt + (K - 1 - m) * kBlock,
                        *dz = dx + (seq.begin + e + m) * s.C + c0;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) din[i] += wm[i] * dz[i];
          }
          if (dwindow_out && e >= last) {
            const float* dwo = dwindow_out + q * W + (e - last) * s.C + c0;
            for (int64_t i = 0; i < n; ++i) din[i] += dwo[i];
          }
          float* dst = e >= 0
                           ? dx + (seq.begin + e) * s.C + c0
                           : (dwindow_in ? dwindow_in + q * W + (e + K - 1) * s.C + c0 : nullptr);
          if (dst) std::copy(din, din + n, dst);
        }
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < K; ++j) dw[(c0 + i) * K + j] += blk.dw[j * kBlock + i];
    }
  }
}

}  // namespace k3::kernels::kda
