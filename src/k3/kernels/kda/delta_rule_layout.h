// Where one (sequence, head) lives in the layouts of delta_rule.h, shared by the recurrent and
// the chunked implementations.
#pragma once

#include <algorithm>
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

// The chunked kernels' work items: groups of heads of one sequence that one thread walks in
// lockstep, chunk by chunk. The heads of a token are adjacent in memory ([.., T, H, K] rows), and
// the hardware prefetcher brings a head's neighbours in with it: walked together, the heads use
// those lines while they are cached instead of fetching them again. Each sequence is cut into as
// few groups as still give every thread an item.
struct HeadGroups {
  int64_t size;   // heads per group (the last group of a sequence may have fewer)
  int64_t count;  // groups in all
  int64_t per_sequence;
  // Indices (sequence * H + head) of group `item`'s heads: [first, last).
  int64_t first(const DeltaRuleShape& s, int64_t item) const {
    return item / per_sequence * s.H + item % per_sequence * size;
  }
  int64_t last(const DeltaRuleShape& s, int64_t item) const {
    return std::min(first(s, item) + size, (item / per_sequence + 1) * s.H);
  }
};
HeadGroups head_groups(const DeltaRuleShape& s, int threads);

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
