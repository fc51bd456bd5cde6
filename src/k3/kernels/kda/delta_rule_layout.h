// Where one (sequence, head) lives in the layouts of delta_rule.h, shared by the recurrent and
// the chunked implementations.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/kernels/kda/delta_rule.h"

namespace k3::kernels::kda::layout {

// Element offsets of token 0 of one (sequence, head), and the row strides between tokens.
struct HeadRows {
  int64_t length;       // tokens in the sequence
  int64_t qk, v, beta;  // offsets into q/k/g (and their gradients), v/out, beta
  int64_t state;        // offset into [N, H, K, V] states
  int64_t ldqk, ldv, ldbeta;
};

// Sequence n = index / H, head h = index % H.
HeadRows head_rows(const DeltaRuleShape& s, int64_t index);

// Throws k3::Error naming the kernel and the bad field.
void check_shape(const char* kernel, const DeltaRuleShape& s);
// The five per-token arrays (or their gradients) must be given unless there are no tokens.
void check_pointers(const char* kernel, const DeltaRuleShape& s, const void* q, const void* k,
                    const void* v, const void* g, const void* beta);

inline int64_t num_chunks(int64_t length) { return (length + kChunk - 1) / kChunk; }

// Index of the first chunk of each sequence, and the total as the last entry (N + 1 entries).
std::vector<int64_t> first_chunks(const DeltaRuleShape& s);

// Floats of one chunk's record in chunk_saved: its entry state (K×V), then the products its
// backward reads (chunk_tiles.h, ChunkProducts).
int64_t chunk_record_floats(const DeltaRuleShape& s);

// Offset into chunk_saved of the record of chunk j of (sequence, head) index.
inline int64_t chunk_record(const DeltaRuleShape& s, const std::vector<int64_t>& first_chunk,
                            int64_t index, int64_t j) {
  return ((first_chunk[index / s.H] + j) * s.H + index % s.H) * chunk_record_floats(s);
}

}  // namespace k3::kernels::kda::layout
