// The tokens a context-parallel rank holds: of every sequence, chunks r and 2·cp − 1 − r of
// 2·cp equal chunks (zig-zag, so that every rank does the same causal attention work), one after
// the other. Every layer's context-parallel path assumes this layout (context/kcp.h,
// context/ring_attention.h).
#pragma once

#include <cstdint>
#include <vector>

#include "k3/model/model.h"

namespace k3::model {

// Rank `rank` of `ranks`'s share of b (tokens and targets), copied into `buffer`; b itself when
// ranks = 1. Throws k3::Error naming the sequence length when it does not split into 2·ranks.
TokenBatch context_share(const TokenBatch& b, int ranks, int rank, std::vector<int32_t>& buffer);

}  // namespace k3::model
