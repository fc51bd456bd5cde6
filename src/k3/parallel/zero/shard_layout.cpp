#include "k3/parallel/zero/shard_layout.h"

#include <algorithm>

#include "k3/base/error.h"

namespace k3::parallel {

FlatRange Bucket::piece(int rank) const {
  size_t at = range.begin;
  for (int r = 0; r < rank; ++r) at += static_cast<size_t>(counts[static_cast<size_t>(r)]);
  return {at, at + static_cast<size_t>(counts[static_cast<size_t>(rank)])};
}

ShardLayout::ShardLayout(const model::ParamRegistry& params, int ranks, int rank,
                         size_t bucket_floats)
    : ranks_(ranks), rank_(rank) {
  K3_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard layout: rank ", rank, " of ", ranks);
  const int n = params.size();
  // Where parameter i's region ends: the next parameter's offset (padding included).
  auto end_of = [&](int i) { return i + 1 < n ? params.info(i + 1).offset : params.flat_size(); };
  int end = n;
  while (end > 0) {
    int first = end - 1;
    size_t floats = end_of(end - 1) - params.info(first).offset;
    while (first > 0 && (bucket_floats == 0 || floats < bucket_floats)) {
      --first;
      floats = end_of(end - 1) - params.info(first).offset;
    }
    Bucket b;
    b.range = {params.info(first).offset, end_of(end - 1)};
    b.first_param = first;
    b.end_param = end;
    const int64_t len = static_cast<int64_t>(b.range.size());
    for (int r = 0; r < ranks; ++r) b.counts.push_back(len * (r + 1) / ranks - len * r / ranks);
    buckets_.push_back(std::move(b));
    end = first;
  }
}

ShardLayout ShardLayout::alone() const {
  ShardLayout one;
  one.buckets_ = buckets_;
  for (Bucket& b : one.buckets_) b.counts = {static_cast<int64_t>(b.range.size())};
  return one;
}

size_t ShardLayout::floats_of(FlatRange r, int rank) const {
  K3_CHECK(rank >= 0 && rank < ranks_, "shard layout: rank ", rank, " of ", ranks_);
  auto first = std::partition_point(buckets_.begin(), buckets_.end(),
                                    [&](const Bucket& b) { return b.range.begin >= r.end; });
  auto last = std::partition_point(first, buckets_.end(),
                                   [&](const Bucket& b) { return b.range.end > r.begin; });
  size_t n = 0;
  for (auto b = first; b != last; ++b) {
    const FlatRange p = b->piece(rank);
    const size_t lo = std::max(p.begin, r.begin), hi = std::min(p.end, r.end);
    if (lo < hi) n += hi - lo;
  }
  return n;
}

std::vector<FlatRange> ShardLayout::owned(int r) const {
  std::vector<FlatRange> out;
  for (const Bucket& b : buckets_)
    if (FlatRange p = b.piece(r); p.size() > 0) out.push_back(p);
  std::sort(out.begin(), out.end(), [](FlatRange a, FlatRange b) { return a.begin < b.begin; });
  return out;
}

}  // namespace k3::parallel
