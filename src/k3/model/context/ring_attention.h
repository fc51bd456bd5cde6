// Ring attention for gated MLA under context parallelism. The sequence is cut into 2·cp chunks
// assigned zig-zag: rank r holds chunks r and 2·cp − 1 − r (its local rows, per batch row, are
// those two chunks in that order), so every rank does the same causal work.
//
// What travels around the ring is MLA's compressed per-token cache, [c_kv_n | k_r]
// (r_kv + d_r floats a token, whatever the head count), never the expanded keys and values: each
// rank expands the block it holds with kv_b_proj itself. At step t rank r holds the block of rank
// r − t and attends its query chunks to the key chunks that precede them (a chunk's own keys by
// the causal kernel, earlier chunks by block attention, later ones not at all); the partial
// results merge by log-sum-exp (kernels/attention_block.h). The next block's transfer is posted
// before the current block's compute, so it overlaps it.
//
// The backward passes each block around the ring again with a gradient accumulator beside it:
// every rank adds the gradient of the keys and values it used (through kv_b_proj's backward,
// whose weight gradient accumulates where it runs), and after cp hops the accumulator is back at
// its owner.
//
// Packed documents (one batch row, RingShape::documents): each query chunk meets a key chunk run
// by run (context/documents.h), a run's queries seeing the chunk's keys from their document's
// start on; a run whose document starts after the key chunk skips it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "k3/base/arena.h"
#include "k3/dist/comm.h"
#include "k3/kernels/gemm.h"

namespace k3::model {

struct RingShape {
  int64_t B = 1, C = 1;  // batch rows; tokens per chunk (2·C local rows per row)
  int64_t H = 1, d_n = 0, d_r = 0, d_v = 0, r_kv = 0;
  // The sequence's document starts, global positions (B = 1), or empty: each row one document.
  std::span<const int64_t> documents;
  kernels::Precision precision = kernels::Precision::F32;  // of the attention products
  int64_t rows() const { return B * 2 * C; }
  int64_t latent() const { return r_kv + d_r; }
};

// kv_b_proj: latents c [rows, r_kv] into k_n [rows, H, d_n] and v [rows, H, d_v].
using ExpandKv = std::function<void(const float* c, int64_t rows, float* k_n, float* v)>;
// Its backward: adds the latents' gradient to dc [rows, r_kv] (and the weight's to its gradient).
using ExpandKvBackward = std::function<void(const float* c, const float* dk_n, const float* dv,
                                            int64_t rows, float* dc)>;

// Both take their scratch (the blocks in flight, the expanded keys) from `scratch`, the step
// arena, and rewind it; `expand` may allocate there too, within its own scope.
// q [rows, H, d_n + d_r]; latent [rows, r_kv + d_r] (this rank's [c_kv_n | k_r]);
// out [rows, H, d_v], lse [B, H, 2C].
void ring_attention_forward(Arena& scratch, const dist::Comm& cp, const RingShape& s,
                            const float* q, const float* latent, const ExpandKv& expand, float* out,
                            float* lse);
// dq [rows, H, d_n + d_r] and dlatent [rows, r_kv + d_r] are written.
void ring_attention_backward(Arena& scratch, const dist::Comm& cp, const RingShape& s,
                             const float* q, const float* latent, const float* out,
                             const float* lse, const float* dout, const ExpandKv& expand,
                             const ExpandKvBackward& expand_backward, float* dq, float* dlatent);

}  // namespace k3::model
