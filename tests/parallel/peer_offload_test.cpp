// The offload policy into a peer rank's memory (mpirun -np 2 and 4: ranks 2k and 2k+1 lend each
// other a window): each rank trains its own batch with its tensors offloaded to its peer and gets
// the gradients of keep bit for bit, while its peer does the same into its memory.
#include "k3/parallel/offload/peer_offload.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/model_util.h"
#include "common/test_util.h"
#include "k3/model/model.h"

namespace k3::parallel {
namespace {

TEST(PeerOffloadMpi, MatchesKeepBitForBit) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() % 2 != 0) GTEST_SKIP() << "pairs ranks: runs under mpirun -np 2 and 4";
  const model::ModelConfig c =
      model::load_model_config(k3::testing::source_dir() + "/configs/k3-nano.json");
  const int64_t B = 2, T = 32;
  const auto tokens = k3::testing::random_tokens(B * T, 259, 50 + world.rank());
  const auto targets = k3::testing::random_tokens(B * T, 259, 60 + world.rank());
  auto grads = [&](bool offload) {
    model::Model m(c);
    m.initialize(5);
    k3::testing::perturb_attn_res(m);
    Arena arena(size_t{64} << 20, false);
    activation::ActivationManager acts;
    if (offload) {
      acts.configure({activation::Policy::Offload, {}});
      acts.set_offload_store(std::make_unique<PeerOffload>(world, size_t{16} << 20));
    }
    double loss = 0;
    for (int step = 0; step < 2; ++step) {
      m.params().zero_grads();
      acts.reset_stats();
      loss += m.forward_backward(arena, acts, {tokens.data(), targets.data(), B, T}, 0.01f).sum;
    }
    if (offload) {
      EXPECT_GT(acts.stats().offloaded_peak, size_t{100} << 10);
    }
    const model::ParamRegistry& p = m.params();
    std::vector<float> g(p.grads(), p.grads() + p.flat_size());
    g.push_back(static_cast<float>(loss));
    world.barrier();  // the windows are freed together
    return g;
  };
  const std::vector<float> keep = grads(false), peer = grads(true);
  EXPECT_EQ(std::memcmp(keep.data(), peer.data(), keep.size() * sizeof(float)), 0);
  EXPECT_EQ(PeerOffload(world, 4096).where(), "rank " + std::to_string(world.rank() ^ 1));
}

TEST(PeerOffload, ARunOfOneRankOrAnOddNumberIsRefused) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() % 2 == 0) GTEST_SKIP() << "an odd world";
  const std::string e = k3::testing::error_of([&] { PeerOffload(world, 4096); });
  EXPECT_NE(e.find("activation.offload_to"), std::string::npos) << e;
}

}  // namespace
}  // namespace k3::parallel
