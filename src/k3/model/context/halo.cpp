#include "k3/model/context/halo.h"

#include <algorithm>

#include "k3/base/profile.h"
#include "k3/model/context/scratch.h"

namespace k3::model {
namespace {

constexpr int kHaloTag = 71;

// Receives from `from` (none: zeros) while sending to `to` (none: nothing).
void shift(const dist::Comm& cp, const float* mine, float* received, int64_t n, int to, int from) {
  ProfileScope time("conv halos");
  dist::Request recv, send;
  if (from >= 0 && from < cp.size())
    recv = cp.recv_async(received, n, from, kHaloTag);
  else
    std::fill(received, received + n, 0.f);
  if (to >= 0 && to < cp.size()) send = cp.send_async(mine, n, to, kHaloTag);
  recv.wait();
  send.wait();
}

}  // namespace

void pass_to_next(const dist::Comm& cp, const float* mine, float* from_previous, int64_t n) {
  shift(cp, mine, from_previous, n, cp.rank() + 1, cp.rank() - 1);
}

void pass_to_previous(const dist::Comm& cp, const float* mine, float* from_next, int64_t n) {
  shift(cp, mine, from_next, n, cp.rank() - 1, cp.rank() + 1);
}

namespace {

// Slot j's windows of every group and row, [groups, B, W], out of or into [groups, 2B, W].
float* slot_of(Arena& scratch, const float* x, int64_t groups, int64_t B, int64_t W, int j) {
  float* out = scratch_floats(scratch, groups * B * W);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(x + ((g * B + b) * 2 + j) * W, W, out + (g * B + b) * W);
  return out;
}
void put_slot(float* x, const float* part, int64_t groups, int64_t B, int64_t W, int j) {
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(part + (g * B + b) * W, W, x + ((g * B + b) * 2 + j) * W);
}

}  // namespace

void zigzag_windows(Arena& scratch, const dist::Comm& cp, const float* tails, float* windows,
                    int64_t groups, int64_t B, int64_t W) {
  ArenaScope scope(scratch);
  const int64_t n = groups * B * W;
  const float *t0 = slot_of(scratch, tails, groups, B, W, 0),
              *t1 = slot_of(scratch, tails, groups, B, W, 1);
  float *w0 = scratch_floats(scratch, n), *w1 = scratch_floats(scratch, n);
  pass_to_next(cp, t0, w0, n);
  pass_to_previous(cp, t1, w1, n);
  // Span cp follows span cp − 1, both here.
  if (cp.rank() == cp.size() - 1) std::copy_n(t0, n, w1);
  put_slot(windows, w0, groups, B, W, 0);
  put_slot(windows, w1, groups, B, W, 1);
}

void zigzag_windows_backward(Arena& scratch, const dist::Comm& cp, const float* dwindows,
                             float* dtails, int64_t groups, int64_t B, int64_t W) {
  ArenaScope scope(scratch);
  const int64_t n = groups * B * W;
  const float *d0 = slot_of(scratch, dwindows, groups, B, W, 0),
              *d1 = slot_of(scratch, dwindows, groups, B, W, 1);
  float *t0 = scratch_floats(scratch, n), *t1 = scratch_floats(scratch, n);
  pass_to_previous(cp, d0, t0, n);
  pass_to_next(cp, d1, t1, n);
  // The last rank's slot 1 window was its own slot 0 tail.
  if (cp.rank() == cp.size() - 1) std::copy_n(d1, n, t0);
  put_slot(dtails, t0, groups, B, W, 0);
  put_slot(dtails, t1, groups, B, W, 1);
}

namespace {

// With packed documents: each window of halo [groups, 2B, W] keeps only its last `continued`
// positions, the inputs of the document its span continues.
void mask_documents(const ConvHalo& h, int64_t groups, float* halo) {
  const int64_t W = h.window();
  for (size_t j = 0; j < h.documents.size(); ++j) {
    const int64_t masked = h.taps - std::min(h.taps, h.documents[j].continued);
    for (int64_t g = 0; g < groups; ++g)
      std::fill_n(halo + (g * 2 * h.B + static_cast<int64_t>(j)) * W, masked * h.P, 0.f);
  }
}

// Where piece `piece`'s last `taps` inputs start in its convolution's input [2B·C, P].
int64_t tail_of(const ConvHalo& h, int64_t piece) { return ((piece + 1) * h.C - h.taps) * h.P; }

}  // namespace

void conv_halo_forward(Arena& scratch, const dist::Comm& cp, const ConvHalo& h,
                       std::initializer_list<const float*> inputs, float* halo) {
  ArenaScope scope(scratch);
  const auto groups = static_cast<int64_t>(inputs.size());
  const int64_t W = h.window();
  float* tails = scratch_floats(scratch, groups * 2 * h.B * W);
  int64_t g = 0;
  for (const float* in : inputs) {
    for (int64_t piece = 0; piece < 2 * h.B; ++piece)
      std::copy_n(in + tail_of(h, piece), W, tails + (g * 2 * h.B + piece) * W);
    ++g;
  }
  zigzag_windows(scratch, cp, tails, halo, groups, h.B, W);
  mask_documents(h, groups, halo);
}

void conv_halo_backward(Arena& scratch, const dist::Comm& cp, const ConvHalo& h, float* dhalo,
                        std::initializer_list<float*> dinputs) {
  ArenaScope scope(scratch);
  const auto groups = static_cast<int64_t>(dinputs.size());
  const int64_t W = h.window();
  float* dtails = scratch_floats(scratch, groups * 2 * h.B * W);
  mask_documents(h, groups, dhalo);
  zigzag_windows_backward(scratch, cp, dhalo, dtails, groups, h.B, W);
  int64_t g = 0;
  for (float* din : dinputs) {
    for (int64_t piece = 0; piece < 2 * h.B; ++piece) {
      float* at = din + tail_of(h, piece);
      const float* add = dtails + (g * 2 * h.B + piece) * W;
      for (int64_t i = 0; i < W; ++i) at[i] += add[i];
    }
    ++g;
  }
}

}  // namespace k3::model
