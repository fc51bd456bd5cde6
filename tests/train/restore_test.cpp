// Restoring a model and its optimizer state from a checkpoint read on demand: the weights come
// back bit for bit; a checkpoint that lacks a parameter or holds one in another shape is refused,
// naming it, before any weight is copied; optimizer tensors are read one at a time into one
// reused buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

using testing::error_of;

class RestoreTest : public ::testing::Test {
 protected:
  RestoreTest() {
    const model::ModelConfig config =
        model::load_model_config(testing::source_dir() + "/configs/dense-tiny.json");
    saved_ = open_session(RunConfig{}, config);
    saved_->model->initialize(7);
    into_ = open_session(RunConfig{}, config);
    into_->model->initialize(8);
  }

  std::vector<float> weights(const Session& s) const {
    const model::ParamRegistry& p = s.model->params();
    return {p.values(), p.values() + p.flat_size()};
  }
  // Saves CK at step 1 of the run directory and loads it back.
  Checkpoint saved(const CheckpointContents& ck) {
    return load_checkpoint(save_checkpoint(run_.path(), 1, ck));
  }
  CheckpointContents contents(std::vector<TensorSource> optimizer = {}) const {
    return make_checkpoint(*saved_, std::move(optimizer), nlohmann::json::object());
  }

  testing::TempDir run_{"k3_restore"};
  std::unique_ptr<Session> saved_, into_;
};

TEST_F(RestoreTest, WeightsComeBackBitForBit) {
  ASSERT_NE(weights(*saved_), weights(*into_));
  restore_weights(*into_->model, saved(contents()), "ck");
  EXPECT_EQ(weights(*into_), weights(*saved_));
}

TEST_F(RestoreTest, AMissingOrMisshapenParameterIsRefusedBeforeAnyCopy) {
  const std::vector<float> before = weights(*into_);
  CheckpointContents missing = contents();
  const std::string last = missing.model.back().name;
  ASSERT_EQ(last, into_->model->params().info(into_->model->params().size() - 1).name);
  missing.model.pop_back();
  EXPECT_NE(error_of([&] {
              restore_weights(*into_->model, saved(missing), "ck");
            }).find("file ck, field " + last + ": tensor missing from the checkpoint"),
            std::string::npos);
  EXPECT_EQ(weights(*into_), before) << "weights were copied before the refusal";

  CheckpointContents misshapen = contents();
  TensorSource& w = misshapen.model.back();
  const Shape right = w.shape;
  ASSERT_EQ(right.size(), 2u);
  w.shape = {right[1], right[0]};
  EXPECT_NE(error_of([&] { restore_weights(*into_->model, saved(misshapen), "ck"); })
                .find("checkpoint holds F32 " + shape_str(w.shape) + ", the model expects F32 " +
                      shape_str(right)),
            std::string::npos);
  EXPECT_EQ(weights(*into_), before) << "weights were copied before the refusal";
}

TEST_F(RestoreTest, OptimizerStateIsReadOneTensorAtATimeIntoOneBuffer) {
  Tensor big = Tensor::empty({3, 4}), small = Tensor::empty({2});
  for (int i = 0; i < 12; ++i) big.f32()[i] = static_cast<float>(i);
  small.f32()[0] = -1, small.f32()[1] = -2;
  const Checkpoint ck = saved(contents(tensor_sources({{"big", big}, {"small", small}})));
  auto find = optimizer_state_reader(ck, "ck");
  const Tensor* b = find("big");
  ASSERT_EQ(b->shape(), (Shape{3, 4}));
  EXPECT_EQ(std::memcmp(b->data(), big.data(), big.nbytes()), 0);
  const void* buffer = b->data();
  const Tensor* s = find("small");
  ASSERT_EQ(s->shape(), (Shape{2}));
  EXPECT_EQ(s->f32()[1], -2.f);
  EXPECT_EQ(s->data(), buffer) << "a smaller tensor did not reuse the buffer";
  EXPECT_NE(error_of([&] {
              find("exp_avg.missing");
            }).find("file ck, field exp_avg.missing: tensor missing from the checkpoint"),
            std::string::npos);
}

}  // namespace
}  // namespace k3::train
