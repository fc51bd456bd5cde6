// The activation manager keeps each micro-batch's tensors apart and releases them one at a time.
#include "k3/activation/manager.h"

#include <gtest/gtest.h>

#include "k3/base/error.h"

namespace k3::activation {
namespace {

TEST(ActivationManager, MicroBatchesSaveUnderTheSameNamesApart) {
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  ActivationManager m;
  m.save(0, "layer.x", Tensor::view(a, {2}));
  m.save(7, "layer.x", Tensor::view(b, {3}));
  EXPECT_EQ(m.load(0, "layer.x").f32(), a);
  EXPECT_EQ(m.load(7, "layer.x").f32(), b);
  EXPECT_EQ(m.count(), 2u);
  EXPECT_EQ(m.in_flight(), 2u);
  EXPECT_THROW(m.save(7, "layer.x", Tensor::view(a, {2})), Error);  // twice in one micro-batch
  EXPECT_THROW(m.load(3, "layer.x"), Error);                        // a micro-batch never seen

  m.release(0);  // micro-batch 7 is still in flight
  EXPECT_FALSE(m.contains(0, "layer.x"));
  EXPECT_THROW(m.load(0, "layer.x"), Error);
  EXPECT_EQ(m.load(7, "layer.x").f32(), b);
  EXPECT_EQ(m.in_flight(), 1u);
  m.save(0, "layer.x", Tensor::view(a, {2}));  // the id is free again
  m.clear();
  EXPECT_EQ(m.count(), 0u);
  EXPECT_FALSE(m.contains(7, "layer.x"));
}

}  // namespace
}  // namespace k3::activation
