// How data parallelism cuts the flat parameter and gradient buffers (model/params.h).
//
// Buckets: the parameters in the order the backward finishes them (the reverse of registration:
// head and final norm first, then the layers from last to first, the embedding last), grouped
// into consecutive runs of at least `bucket_floats` values. Because the flat buffer is laid out
// in registration order, every bucket is one contiguous range of it, alignment padding
// included. Buckets are listed in launch order: the order their gradients become final.
//
// Shards (ZeRO): each bucket is split into `ranks` consecutive pieces of near-equal length, and
// rank r owns piece r of every bucket. A reduce-scatter of a bucket therefore leaves each rank
// its own piece, and an all-gather of the bucket rebuilds it everywhere, each collective moving
// a balanced share from every rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "k3/model/params.h"

namespace k3::parallel {

struct FlatRange {
  size_t begin = 0, end = 0;  // floats, into the flat buffers
  size_t size() const { return end - begin; }
};

struct Bucket {
  FlatRange range;
  int first_param = 0, end_param = 0;  // registry indices [first, end)
  std::vector<int64_t> counts;         // floats of each rank's piece
  FlatRange piece(int rank) const;     // rank's piece of the bucket
};

class ShardLayout {
 public:
  // bucket_floats = 0: one bucket for everything.
  ShardLayout(const model::ParamRegistry& params, int ranks, int rank, size_t bucket_floats);
  // The same buckets held whole by one rank: what each rank holds when nothing is sharded.
  ShardLayout alone() const;

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Rank r's pieces, in flat-buffer order.
  std::vector<FlatRange> owned(int r) const;
  std::vector<FlatRange> owned() const { return owned(rank_); }
  // Floats of [r.begin, r.end) in rank's pieces: the sizes for_each_owner gives that rank, summed.
  size_t floats_of(FlatRange r, int rank) const;
  // Calls f(rank, piece) for each non-empty intersection of [r.begin, r.end) with a rank's
  // pieces, in flat-buffer order.
  template <typename F>
  void for_each_owner(FlatRange r, F f) const {
    // Buckets run from the end of the flat buffer to its start: the ones r meets are
    // [first, last), visited last to first.
    auto first = std::partition_point(buckets_.begin(), buckets_.end(),
                                      [&](const Bucket& b) { return b.range.begin >= r.end; });
    auto last = std::partition_point(first, buckets_.end(),
                                     [&](const Bucket& b) { return b.range.end > r.begin; });
    for (auto b = last; b != first;) {
      --b;
      size_t at = b->range.begin;
      for (int k = 0; k < ranks_; ++k) {
        const FlatRange p{at, at + static_cast<size_t>(b->counts[static_cast<size_t>(k)])};
        at = p.end;
        const size_t lo = std::max(p.begin, r.begin), hi = std::min(p.end, r.end);
        if (lo < hi) f(k, FlatRange{lo, hi});
      }
    }
  }

 private:
  ShardLayout() = default;

  int ranks_ = 1, rank_ = 0;
  std::vector<Bucket> buckets_;
};

}  // namespace k3::parallel
