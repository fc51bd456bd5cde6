// The --profile buckets form a tree as their scopes nest: a bucket timed within another is its
// child, so no child exceeds its parent and each parent's own time ("other") is never negative,
// however many buckets nest within one another (the GEMMs within a layer within the step).
#include "k3/base/profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace k3 {
namespace {

void busy(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

const ProfileNode* child(const ProfileNode& n, const std::string& name) {
  for (const ProfileNode& c : n.children)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(Profile, NestedBucketsFormATreeWhoseChildrenFitTheirParent) {
  Profile::reset();
  Profile::enable(true);
  for (int step = 0; step < 2; ++step) {
    ProfileScope s("step");
    {
      ProfileScope layer("kda");
      ProfileScope g("gemm");
      busy(4);
    }
    {
      ProfileScope layer("moe");
      {
        ProfileScope g("gemm");
        busy(4);
      }
      busy(1);
    }
    busy(2);  // the step's own time: embeddings, norms
  }
  {
    ProfileScope o("optimizer");
    ProfileScope g("gemm");
    busy(2);
  }
  Profile::enable(false);
  const ProfileNode root = Profile::tree();
  Profile::reset();

  ASSERT_EQ(root.children.size(), 2u);
  const ProfileNode* step = child(root, "step");
  ASSERT_TRUE(step);
  EXPECT_EQ(root.children.front().name, "step");  // by descending time
  EXPECT_EQ(step->children.size(), 2u);
  EXPECT_EQ(child(root, "gemm"), nullptr) << "a nested bucket is no root";
  for (const ProfileNode* layer : {child(*step, "kda"), child(*step, "moe")}) {
    ASSERT_TRUE(layer);
    ASSERT_TRUE(child(*layer, "gemm"));
    EXPECT_LE(child(*layer, "gemm")->seconds, layer->seconds);
    EXPECT_GE(layer->own_seconds(), 0);
  }
  // The step's own time is its 2 x 2 ms outside the layers, not less than zero.
  EXPECT_GE(step->own_seconds(), 0.0035);
  EXPECT_LE(step->own_seconds(), step->seconds);
  EXPECT_NEAR(root.seconds, step->seconds + child(root, "optimizer")->seconds, 1e-12);

  const std::string text = format_profile(root, root.seconds);
  EXPECT_NE(text.find("  step"), std::string::npos);
  EXPECT_NE(text.find("      gemm"), std::string::npos) << text;  // depth 2
  EXPECT_EQ(text.find("-"), std::string::npos) << "a negative time:\n" << text;
}

TEST(Profile, OffItTimesNothing) {
  Profile::reset();
  { ProfileScope s("step"); }
  EXPECT_TRUE(Profile::tree().children.empty());
}

}  // namespace
}  // namespace k3
