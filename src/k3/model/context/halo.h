// Halo exchanges along a context-parallel group, whose ranks hold consecutive spans of a
// sequence in rank order: what a span's first tokens need from the end of the previous span
// (a short convolution's window), and the gradient going back.
#pragma once

#include <cstdint>

#include "k3/base/arena.h"
#include "k3/dist/comm.h"

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

}  // namespace k3::model
