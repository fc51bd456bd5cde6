// Halo exchanges along a context-parallel group, whose ranks hold consecutive spans of a
// sequence in rank order: what a span's first tokens need from the end of the previous span
// (a short convolution's window), and the gradient going back.
#pragma once

#include <cstdint>

#include "k3/dist/comm.h"

namespace k3::model {

// Sends `n` floats `mine` to the next rank and receives the previous rank's into `from_previous`
// (zeros on the first rank).
void pass_to_next(const dist::Comm& cp, const float* mine, float* from_previous, int64_t n);
// The reverse direction: to the previous rank, from the next (zeros on the last rank).
void pass_to_previous(const dist::Comm& cp, const float* mine, float* from_next, int64_t n);

}  // namespace k3::model
