#include "k3/parallel/pipeline/model_stages.h"

#include "k3/base/error.h"

namespace k3::parallel::pipeline {

ModelStages::ModelStages(model::Model& model, activation::ActivationManager& acts,
                         ArenaRegions& regions, std::span<model::DeferredWeightGrads> deferred,
                         std::span<const model::TokenBatch> micro_batches, float grad_scale)
    : model_(model),
      acts_(acts),
      regions_(regions),
      deferred_(deferred),
      micro_batches_(micro_batches),
      grad_scale_(grad_scale),
      rank_(model.grid().pp().rank()),
      region_of_(micro_batches.size() * static_cast<size_t>(model.pipeline().vp), -1),
      image_tokens_(micro_batches.size(), nullptr) {
  K3_CHECK(deferred.size() == static_cast<size_t>(regions.count()), "pipeline: ", deferred.size(),
           " deferred weight-gradient queues for ", regions.count(), " regions");
  for (int r = regions.count() - 1; r >= 0; --r) free_regions_.push_back(r);
}

model::Stage ModelStages::stage(int chunk) const {
  return model_.pipeline().stage(chunk * model_.pipeline().pp + rank_);
}

int64_t ModelStages::input_floats(int chunk) const {
  const model::TokenBatch& b = micro_batches_.front();
  return model_.payload_floats(stage(chunk).first, b.B * b.T);
}

int64_t ModelStages::output_floats(int chunk) const {
  const model::TokenBatch& b = micro_batches_.front();
  return model_.payload_floats(stage(chunk).end, b.B * b.T);
}

model::MicroBatch ModelStages::micro_batch(int micro, int chunk, int region) {
  return {micro * model_.pipeline().vp + chunk, regions_[region], acts_};
}

int ModelStages::take_region(int micro, int chunk) {
  int& region = region_of_[static_cast<size_t>(micro * model_.pipeline().vp + chunk)];
  if (region >= 0) return region;  // taken by the micro-batch's filler
  K3_CHECK(!free_regions_.empty(), "pipeline: more micro-batches in flight than the ",
           regions_.count(), " activation regions");
  region = free_regions_.back();
  free_regions_.pop_back();
  return region;
}

void ModelStages::forward(int micro, int chunk, const float* in, float* out) {
  const int region = take_region(micro, chunk);
  const model::TokenBatch& b = micro_batches_[static_cast<size_t>(micro)];
  model::MicroBatch mb = micro_batch(micro, chunk, region);
  if (stage(chunk).embedding) mb.image_tokens = image_tokens_[static_cast<size_t>(micro)];
  loss_sum_ += model_.forward_stage(mb, stage(chunk), b, grad_scale_, in, out).sum;
}

int& ModelStages::region_of(int micro, int chunk, const char* what) {
  int& region = region_of_[static_cast<size_t>(micro * model_.pipeline().vp + chunk)];
  K3_CHECK(region >= 0, "pipeline: the ", what, " of micro-batch ", micro, " chunk ", chunk,
           " before its forward");
  return region;
}

void ModelStages::release(int& region) {
  regions_[region].reset();
  free_regions_.push_back(region);
  region = -1;
}

void ModelStages::backward(int micro, int chunk, const float* d_out, float* d_in,
                           bool defer_weights) {
  int& region = region_of(micro, chunk, "backward");
  model::MicroBatch mb = micro_batch(micro, chunk, region);
  if (defer_weights) mb.deferred_weight_grads = &deferred_[static_cast<size_t>(region)];
  model_.backward_stage(mb, stage(chunk), micro_batches_[static_cast<size_t>(micro)], d_out, d_in);
  if (!defer_weights) release(region);
}

void ModelStages::backward_weight(int micro, int chunk) {
  int& region = region_of(micro, chunk, "weight gradient");
  deferred_[static_cast<size_t>(region)].run();
  release(region);
}

void ModelStages::filler(int micro) {
  K3_CHECK(model_.has_vision(), "pipeline: a filler node, but this model has no vision tower");
  K3_CHECK(stage(0).embedding, "pipeline: a filler on a rank without the embedding");
  const int region = take_region(micro, 0);
  image_tokens_[static_cast<size_t>(micro)] = model_.encode_images(
      micro_batch(micro, 0, region), micro_batches_[static_cast<size_t>(micro)]);
}

}  // namespace k3::parallel::pipeline
