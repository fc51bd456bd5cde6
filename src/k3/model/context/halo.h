// Halo exchanges along a context-parallel group, whose ranks hold consecutive spans of a
// sequence in rank order: what a span's first tokens need from the end of the previous span
// (a short convolution's window), and the gradient going back.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

#include "k3/base/arena.h"
#include "k3/dist/comm.h"
#include "k3/model/context/kcp.h"

namespace k3::model {

// Sends `n` floats `mine` to the next rank and receives the previous rank's into `from_previous`
// (zeros on the first rank).
void pass_to_next(const dist::Comm& cp, const float* mine, float* from_previous, int64_t n);
// The reverse direction: to the previous rank, from the next (zeros on the last rank).
void pass_to_previous(const dist::Comm& cp, const float* mine, float* from_next, int64_t n);

// Under the zig-zag layout (context/kcp.h, KcpLayout with 2 slots) each rank holds 2·B pieces,
// (row b, slot j) in that order, j = 0 the span r and j = 1 the span 2·cp − 1 − r. For `groups`
// kinds of window of W floats (one per convolution): tails [groups, 2B, W], each piece's last
// inputs, give windows [groups, 2B, W], each piece's predecessor's tail (zeros for a sequence's
// first piece): slot 0's from the previous rank, slot 1's from the next rank (the last rank's
// from its own slot 0). The pieces in transit are scratch of `scratch` (the step arena).
void zigzag_windows(Arena& scratch, const dist::Comm& cp, const float* tails, float* windows,
                    int64_t groups, int64_t B, int64_t W);
// The transpose: each window's gradient goes back to the tail it came from.
void zigzag_windows_backward(Arena& scratch, const dist::Comm& cp, const float* dwindows,
                             float* dtails, int64_t groups, int64_t B, int64_t W);

// The halos of short convolutions (KDA's q, k and v) under the zig-zag layout: this rank's 2·B
// pieces of C tokens each, (row b, slot j) in that order, each piece's convolution starting from
// a window of the `taps` inputs before it, its predecessor's last (zigzag_windows).
struct ConvHalo {
  int64_t B = 1, C = 0, taps = 0, P = 0;  // rows; tokens a piece; window taps; channels
  // With packed documents (one row), this rank's two spans' documents (slot_documents): a window
  // keeps only the inputs of the document its span continues, the rest zeroed, and so do their
  // gradients. Empty: no documents.
  std::span<const SpanDocuments> documents;
  int64_t window() const { return taps * P; }  // floats
};
// For each convolution g of inputs.size(), its input inputs[g] [2B·C, P] gives its windows,
// written to halo [groups, 2B, taps, P].
void conv_halo_forward(Arena& scratch, const dist::Comm& cp, const ConvHalo& h,
                       std::initializer_list<const float*> inputs, float* halo);
// The transpose: the windows' gradients dhalo [groups, 2B, taps, P] (masked in place) are added
// to the inputs' gradients dinputs[g] [2B·C, P] at the tails they came from.
void conv_halo_backward(Arena& scratch, const dist::Comm& cp, const ConvHalo& h, float* dhalo,
                        std::initializer_list<float*> dinputs);

}  // namespace k3::model
