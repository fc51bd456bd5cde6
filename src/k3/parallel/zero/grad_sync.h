// Data-parallel gradient reduction, bucket by bucket, overlapped with the backward.
//
// Each rank's backward accumulates its share of the batch into the flat gradient buffer (scaled
// by 1 / the global token count, so the sum over ranks is the global mean). During the last
// micro-batch's backward the model reports each parameter range whose gradients are final
// (model::GradsFinal); as soon as every parameter of the next bucket in launch order is final,
// that bucket's non-blocking collective starts, while the backward goes on with earlier layers:
//   zero 0 and 1: all-reduce, in place: every rank ends with the whole reduced gradient;
//   zero 2:       reduce-scatter: each rank ends with only its piece of each bucket (copied back
//                 into the flat buffer at the piece's place; the rest of the buffer is stale).
// finish() starts whatever is left and waits. Buckets always start in the same order on every
// rank (the order of the layout), which the collectives require, and each reduction has a fixed
// order, so results do not depend on timing.
//
// Under tensor parallelism, a bucket's replicated parameters whose gradients are partial sums over
// tp (ShardSpec::summed: those that fed only this rank's heads or, under sequence parallelism,
// only its tokens) are first summed over tp, in one all-reduce of the bucket's such gradients
// packed together, just before the bucket's data-parallel reduction starts.
//
// Under expert parallelism each ep rank routed its own tokens, so every dense (not expert-owned)
// gradient is a partial sum over ep as well. Buckets differ between ep ranks (they hold different
// experts), so that sum is not per bucket: as the backward reports parameters final, which every
// ep rank does in the same order, their dense gradients are summed over ep in one packed
// all-reduce (blocking) before their buckets can start. Under context parallelism each cp rank
// holds other tokens of the same sequences, so every gradient (experts' too) is summed over cp
// the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/model/model.h"
#include "k3/parallel/zero/shard_layout.h"

namespace k3::parallel {

class GradSync {
 public:
  // overlap = false starts every bucket in finish(), after the backward (for comparison).
  GradSync(model::ParamRegistry& params, const ShardLayout& layout, const dist::Comm& dp,
           const dist::Comm& tp, const dist::Comm& ep, const dist::Comm& cp, int zero_stage,
           bool overlap);

  // Before the backward whose gradients are the step's last contribution: clears the bucket
  // state; the returned hook is given to that backward.
  model::GradsFinal begin();
  // Starts the remaining buckets and waits for all of them.
  void finish();

  double wait_seconds() const { return wait_seconds_; }  // finish()'s wait, last step

 private:
  void on_final(int first, int end);
  void launch_ready();
  void launch(size_t bucket);
  void sum_over_tp(size_t bucket);
  void sum_over_ep(int first, int end);
  void sum_over_cp(int first, int end);
  // Packs the gradients of `params` into staging_, all-reduces them over `group`, unpacks.
  void sum_packed(const std::vector<int>& params, const dist::Comm& group);

  model::ParamRegistry& params_;
  const ShardLayout& layout_;
  dist::Comm dp_, tp_, ep_, cp_;
  int zero_;
  bool overlap_;
  std::vector<int> bucket_of_;            // parameter index -> bucket
  std::vector<int> final_left_;           // per bucket: parameters not yet final
  std::vector<dist::Request> pending_;    // per bucket
  std::vector<float> piece_;              // zero 2: this rank's reduced pieces, bucket after bucket
  std::vector<size_t> piece_at_;          // zero 2: each bucket's place in piece_
  std::vector<std::vector<int>> summed_;  // per bucket: its parameters summed over tp
  std::vector<float> staging_;            // one bucket's such gradients, packed
  size_t next_ = 0;                       // the next bucket to start
  double wait_seconds_ = 0;
};

}  // namespace k3::parallel
