// The model's stages as a pipeline rank's work (executor.h): chunk c of this rank is the model's
// virtual stage c·pp + rank (model/pipeline_split.h). A filler node runs the vision tower for a
// micro-batch's images (Model::encode_images) in the region its first chunk then uses; without
// one, that chunk's forward runs the tower itself. Each micro-batch chunk in flight takes a
// region of `regions` and an id in the activation manager from its forward until its backward
// returns (under zero-bubble schedules, until its weight-gradient half has run, with that region's
// DeferredWeightGrads holding what it needs), so backwards may come in any order the schedule says.
#pragma once

#include <span>
#include <vector>

#include "k3/base/arena.h"
#include "k3/model/model.h"
#include "k3/parallel/pipeline/executor.h"

namespace k3::parallel::pipeline {

class ModelStages : public StageWork {
 public:
  // `regions` needs as many regions as the schedule holds micro-batch chunks in flight on this
  // rank (Timeline::peak_in_flight), and `deferred` one queue per region.
  ModelStages(model::Model& model, activation::ActivationManager& acts, ArenaRegions& regions,
              std::span<model::DeferredWeightGrads> deferred,
              std::span<const model::TokenBatch> micro_batches, float grad_scale);

  int64_t input_floats(int chunk) const override;
  int64_t output_floats(int chunk) const override;
  void forward(int micro, int chunk, const float* in, float* out) override;
  void backward(int micro, int chunk, const float* d_out, float* d_in,
                bool defer_weights) override;
  void backward_weight(int micro, int chunk) override;
  void filler(int micro) override;

  double loss_sum() const { return loss_sum_; }  // of the micro-batches' last-stage forwards

 private:
  model::Stage stage(int chunk) const;
  model::MicroBatch micro_batch(int micro, int chunk, int region);
  int take_region(int micro, int chunk);
  int& region_of(int micro, int chunk, const char* what);
  void release(int& region);

  model::Model& model_;
  activation::ActivationManager& acts_;
  ArenaRegions& regions_;
  std::span<model::DeferredWeightGrads> deferred_;
  std::span<const model::TokenBatch> micro_batches_;
  float grad_scale_;
  int rank_;
  std::vector<int> free_regions_;
  std::vector<int> region_of_;  // [micro · vp + chunk], -1 when not in flight
  std::vector<const float*> image_tokens_;  // [micro]: the filler's output, null before it
  double loss_sum_ = 0;
};

}  // namespace k3::parallel::pipeline
