// Copies between a global tensor and one rank's shard of it (what checkpoints load and save
// through), checked element by element against multi-index arithmetic, for every rank of a group
// and splits along dimensions 0, 1 and 2, replicated tensors and scalars.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "k3/model/params.h"

namespace k3::model {
namespace {

// The global element index of local element I of P's shard: its local multi-index, shifted by
// shard_start along the split dimension.
int64_t global_index(const ParamInfo& p, int64_t i) {
  int64_t global = 0, stride = 1;
  for (int k = static_cast<int>(p.shape.size()) - 1; k >= 0; --k) {
    const auto d = static_cast<size_t>(k);
    int64_t at = i % p.local_shape[d];
    i /= p.local_shape[d];
    if (k == p.shard.dim) at += p.shard_start;
    global += at * stride;
    stride *= p.shape[d];
  }
  return global;
}

struct Case {
  Shape shape;
  int dim;
};

class ShardCopy : public ::testing::TestWithParam<Case> {};

TEST_P(ShardCopy, EveryRanksShardRoundTripsThroughTheGlobalTensor) {
  const Case& c = GetParam();
  const int group = 2;
  std::vector<float> global(static_cast<size_t>(shape_numel(c.shape)));
  std::iota(global.begin(), global.end(), 0.f);  // each element holds its own index
  std::vector<float> rebuilt(global.size(), -1.f);
  for (int rank = 0; rank < group; ++rank) {
    ParamRegistry reg(GroupPlaces{{"tp", {group, rank}}});
    reg.add("p", c.shape, ParamInit::zeros(), {c.dim, "tp"});
    const ParamInfo& p = reg.info(0);
    std::vector<float> local(static_cast<size_t>(p.local_numel()), -2.f);
    copy_shard_from_global(p, global.data(), local.data());
    for (int64_t i = 0; i < p.local_numel(); ++i)
      ASSERT_EQ(local[static_cast<size_t>(i)], static_cast<float>(global_index(p, i)))
          << "rank " << rank << ", local element " << i;

    // Written back, the shard lands where it came from and nowhere else.
    std::vector<float> placed(global.size(), -1.f);
    copy_shard_to_global(p, local.data(), placed.data());
    int64_t written = 0;
    for (size_t g = 0; g < placed.size(); ++g)
      if (placed[g] != -1.f) {
        ASSERT_EQ(placed[g], global[g]) << "rank " << rank << ", global element " << g;
        ++written;
      }
    EXPECT_EQ(written, p.local_numel()) << "rank " << rank;
    copy_shard_to_global(p, local.data(), rebuilt.data());
  }
  EXPECT_EQ(rebuilt, global) << "the ranks' shards do not tile the tensor";
}

INSTANTIATE_TEST_SUITE_P(Dims, ShardCopy,
                         ::testing::Values(Case{{4, 6}, 0}, Case{{4, 6}, 1}, Case{{4, 6}, -1},
                                           Case{{4, 6, 2}, 0}, Case{{4, 6, 2}, 1},
                                           Case{{4, 6, 2}, 2}, Case{{4, 6, 2}, -1}, Case{{8}, 0},
                                           Case{{}, -1}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = "shape";
                           for (int64_t d : info.param.shape)
                             name.append("_").append(std::to_string(d));
                           if (info.param.dim < 0) return name.append("_replicated");
                           return name.append("_dim").append(std::to_string(info.param.dim));
                         });

}  // namespace
}  // namespace k3::model
