#include "k3/parallel/zero/grad_sync.h"

#include <algorithm>
#include <cstring>

#include "k3/base/error.h"
#include "k3/base/timer.h"

namespace k3::parallel {

GradSync::GradSync(model::ParamRegistry& params, const ShardLayout& layout, const dist::Comm& dp,
                   const dist::Comm& tp, const dist::Comm& ep, const dist::Comm& cp, int zero_stage,
                   bool overlap)
    : params_(params),
      layout_(layout),
      dp_(dp),
      tp_(tp),
      ep_(ep),
      cp_(cp),
      zero_(zero_stage),
      overlap_(overlap) {
  K3_CHECK(layout.ranks() == dp.size(), "gradient sync: a layout for ", layout.ranks(),
           " ranks on a group of ", dp.size());
  const auto& buckets = layout.buckets();
  bucket_of_.assign(static_cast<size_t>(params.size()), -1);
  size_t at = 0;
  summed_.resize(buckets.size());
  size_t widest = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_t summed_floats = 0;
    for (int i = buckets[b].first_param; i < buckets[b].end_param; ++i) {
      bucket_of_[static_cast<size_t>(i)] = static_cast<int>(b);
      if (tp_.size() > 1 && params.info(i).shard.grad_summed_over("tp")) {
        summed_[b].push_back(i);
        summed_floats += static_cast<size_t>(params.info(i).local_numel());
      }
    }
    widest = std::max(widest, summed_floats);
    piece_at_.push_back(at);
    at += buckets[b].piece(layout.rank()).size();
  }
  if (zero_ == 2) piece_.resize(at);
  if (cp_.size() > 1) widest = std::max(widest, params.flat_size());
  if (ep_.size() > 1) {
    size_t dense = 0;
    for (int i = 0; i < params.size(); ++i)
      if (!params.info(i).shard.expert_owned())
        dense += static_cast<size_t>(params.info(i).local_numel());
    widest = std::max(widest, dense);
  }
  staging_.resize(widest);
  pending_.resize(buckets.size());
  final_left_.resize(buckets.size());
}

model::GradsFinal GradSync::begin() {
  const auto& buckets = layout_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b)
    final_left_[b] = buckets[b].end_param - buckets[b].first_param;
  next_ = 0;
  return [this](int first, int end) { on_final(first, end); };
}

void GradSync::on_final(int first, int end) {
  if (ep_.size() > 1) sum_over_ep(first, end);
  if (cp_.size() > 1) sum_over_cp(first, end);
  for (int i = first; i < end; ++i)
    --final_left_[static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])];
  if (!overlap_) return;
  launch_ready();
  for (size_t b = 0; b < next_; ++b) pending_[b].test();  // lets the started ones progress
}

void GradSync::launch_ready() {
  while (next_ < pending_.size() && final_left_[next_] == 0) launch(next_++);
}

void GradSync::sum_over_tp(size_t b) { sum_packed(summed_[b], tp_); }

void GradSync::sum_over_ep(int first, int end) {
  std::vector<int> dense;
  for (int i = first; i < end; ++i)
    if (!params_.info(i).shard.expert_owned()) dense.push_back(i);
  sum_packed(dense, ep_);
}

void GradSync::sum_over_cp(int first, int end) {
  std::vector<int> all;
  for (int i = first; i < end; ++i) all.push_back(i);
  sum_packed(all, cp_);
}

void GradSync::sum_packed(const std::vector<int>& params, const dist::Comm& group) {
  if (params.empty()) return;
  size_t at = 0;
  for (int i : params) {
    const Tensor g = params_.grad(i);
    std::memcpy(staging_.data() + at, g.f32(), g.nbytes());
    at += static_cast<size_t>(g.numel());
  }
  group.all_reduce(staging_.data(), static_cast<int64_t>(at));
  at = 0;
  for (int i : params) {
    const Tensor g = params_.grad(i);
    std::memcpy(g.f32(), staging_.data() + at, g.nbytes());
    at += static_cast<size_t>(g.numel());
  }
}

void GradSync::launch(size_t b) {
  sum_over_tp(b);
  const Bucket& bucket = layout_.buckets()[b];
  float* g = params_.grads() + bucket.range.begin;
  if (zero_ == 2)
    pending_[b] = dp_.reduce_scatter_async(g, piece_.data() + piece_at_[b], bucket.counts);
  else
    pending_[b] = dp_.all_reduce_async(g, static_cast<int64_t>(bucket.range.size()));
}

void GradSync::finish() {
  for (size_t b = next_; b < pending_.size(); ++b)
    K3_CHECK(final_left_[b] == 0, "gradient sync: bucket ", b, " has ", final_left_[b],
             " parameter(s) the backward never reported final");
  Timer t;  // what the backward did not hide: starting the remaining buckets and waiting
  launch_ready();
  for (dist::Request& r : pending_) r.wait();
  wait_seconds_ = t.seconds();
  if (zero_ != 2) return;
  const auto& buckets = layout_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const FlatRange p = buckets[b].piece(layout_.rank());
    std::memcpy(params_.grads() + p.begin, piece_.data() + piece_at_[b], p.size() * sizeof(float));
  }
}

}  // namespace k3::parallel
