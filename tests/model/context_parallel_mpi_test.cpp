// The KDA and gated MLA layers (K3's, and DeepSeek-V3's with rotary embeddings) under context
// parallelism (the whole job one cp group; skipped in one process) against one process on the
// same sequences: each rank runs its tokens of every
// sequence (two zig-zag chunks: chunks r and 2·cp − 1 − r of 2·cp) and
// compares its rows of the output and of the input gradient, and every parameter gradient
// summed over the ranks (each rank's is its tokens' part).
//
// Decays: the layer's own at initialization (about −2.5 per token: little state survives a
// span), slow ones (dt_bias = −8: g ≈ −0.002, so the state carried across every rank boundary
// shapes every later output), and decays at the gate's bound (dt_bias = +5: g ≈ −4.97; further
// into saturation the gate parameters' gradients shrink to rounding).
// Packed documents (KDA and gated MLA, one row): starts inside spans, at a span boundary, and one
// token before a boundary (the next span's convolution window then holds one input of its
// document), with documents crossing several ranks. Tolerance: 1e-4 of each tensor's largest entry
// (fp32, the spans' states composed in another order than the chunked pass carries them; measured
// below 5e-7 for outputs and input gradients, 3.2e-6 for parameter gradients), except the saturated
// gate's parameters at the bound (below).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tp_util.h"
#include "k3/dist/grid.h"
#include "k3/model/layers/kda.h"
#include "k3/model/layers/mla.h"
#include "k3/model/model.h"

namespace k3::model {
namespace {

using k3::testing::max_rel_error;
using k3::testing::random_vec;

constexpr int64_t kB = 2, kT = 128;
constexpr double kTol = 1e-4;

// A rank's tokens of each sequence: consecutive pieces {first, count} in its local order.
using Pieces = std::vector<std::pair<int64_t, int64_t>>;

// The rows of `pieces` of each of B sequences of x ([B, kT, width]), batch row by batch row.
std::vector<float> span(const std::vector<float>& x, int64_t width, const Pieces& pieces,
                        int64_t B = kB) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    for (auto [t0, n] : pieces)
      out.insert(out.end(), x.begin() + (b * kT + t0) * width,
                 x.begin() + (b * kT + t0 + n) * width);
  return out;
}

void set_dt_bias(ParamRegistry& reg, float value) {
  for (int i = 0; i < reg.size(); ++i)
    if (reg.info(i).name.ends_with(".dt_bias")) {
      float* v = reg.value(i).f32();
      std::fill(v, v + reg.info(i).local_numel(), value);
    }
}

using MakeMixer = std::function<std::unique_ptr<Mixer>(ParamRegistry&, const ModelConfig&)>;

// Every layer under context parallelism takes two zig-zag chunks a rank (ring attention's
// balance; KCP and the convolutions' windows follow the chunks in sequence order).
Pieces zig_zag(int rank, int ranks) {
  const int64_t C = kT / (2 * ranks);
  return {{rank * C, C}, {(2 * ranks - 1 - rank) * C, C}};
}

// docs: packed documents of one row, or none (kB rows, each one sequence). config: in configs/.
void compare(const char* what, const MakeMixer& make, const Pieces& pieces,
             std::optional<float> dt_bias = std::nullopt, const std::vector<int64_t>& docs = {},
             const std::string& config = "k3-nano.json") {
  const dist::Comm world = dist::Comm::world();
  const dist::ProcessGrid grid(dist::ParallelDims{.cp = world.size()}, world);
  const ModelConfig c = load_model_config(k3::testing::source_dir() + "/configs/" + config);
  const int64_t d = c.hidden_size, T = kT / world.size(), B = docs.empty() ? kB : 1;
  const std::vector<float> x = random_vec(B * kT * d, 11), dout = random_vec(B * kT * d, 12);

  const auto run = [&](ParamRegistry& reg, const dist::ProcessGrid& g, const float* in,
                       const float* dy, int64_t t, float* out, float* dx) {
    const std::unique_ptr<Mixer> layer = make(reg, c);
    reg.allocate();
    reg.initialize(5);
    if (dt_bias) set_dt_bias(reg, *dt_bias);
    Arena arena(size_t{64} << 20, false);
    activation::ActivationManager acts;
    const Step s{arena, acts, reg, true, g};
    const Sequences seq{B, t, docs};
    layer->forward(s, in, seq, out);
    layer->backward(s, dy, seq, dx);
  };
  ParamRegistry whole, split(places_of(grid));
  std::vector<float> want(x.size()), want_dx(x.size());
  run(whole, dist::single_process(), x.data(), dout.data(), kT, want.data(), want_dx.data());
  const std::vector<float> mine = span(x, d, pieces, B), dmine = span(dout, d, pieces, B);
  std::vector<float> out(mine.size()), dx(mine.size());
  run(split, grid, mine.data(), dmine.data(), T, out.data(), dx.data());

  const std::vector<float> w = span(want, d, pieces, B), wdx = span(want_dx, d, pieces, B);
  const double e_out = max_rel_error(out.data(), w.data(), static_cast<int64_t>(w.size()));
  double biggest = 0;
  for (float v : w) biggest = std::max(biggest, static_cast<double>(std::abs(v)));
  EXPECT_GT(biggest, 0) << what << ": the output is all zero";
  const double e_dx = max_rel_error(dx.data(), wdx.data(), static_cast<int64_t>(w.size()));
  EXPECT_LT(e_out, kTol) << what << ": output";
  EXPECT_LT(e_dx, kTol) << what << ": input gradient";
  double e_grad = 0;
  for (int i = 0; i < split.size(); ++i) {
    float* g = split.grad(i).f32();
    const int64_t n = split.info(i).local_numel();
    world.all_reduce(g, n);
    const double e = max_rel_error(g, whole.grad(whole.find(split.info(i).name)).f32(), n);
    // At the bound the gate saturates: A_log's and dt_bias's gradients are sums of terms scaled by
    // σ' ≈ 7e-3 that largely cancel, so rounding shows more (measured: 4.2e-4).
    const bool saturated =
        dt_bias && *dt_bias > 0 &&
        (split.info(i).name.ends_with(".A_log") || split.info(i).name.ends_with(".dt_bias"));
    EXPECT_LT(e, saturated ? 1e-3 : kTol) << what << ": " << split.info(i).name;
    e_grad = std::max(e_grad, e);
  }
  // The worst rank's figures (rank 0's span starts from a zero state, as in one process).
  std::vector<double> worst(static_cast<size_t>(2 * world.size()), 0);
  worst[static_cast<size_t>(2 * world.rank())] = e_out;
  worst[static_cast<size_t>(2 * world.rank() + 1)] = e_dx;
  world.all_gather(worst.data(), std::vector<int64_t>(static_cast<size_t>(world.size()), 2));
  double w_out = 0, w_dx = 0;
  for (int r = 0; r < world.size(); ++r) {
    w_out = std::max(w_out, worst[static_cast<size_t>(2 * r)]);
    w_dx = std::max(w_dx, worst[static_cast<size_t>(2 * r + 1)]);
  }
  if (world.rank() == 0)
    std::printf("cp%d, %s: output %.2g, input gradient %.2g, parameter gradients %.2g\n",
                world.size(), what, w_out, w_dx, e_grad);
}

class ContextParallelMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world.size() == 1) GTEST_SKIP() << "runs under mpirun -np 2 and 4";
  }
  MakeMixer kda() const {
    return [](ParamRegistry& reg, const ModelConfig& c) {
      return std::make_unique<KimiDeltaAttention>(reg, "kda", c);
    };
  }
  MakeMixer mla() const {
    return [](ParamRegistry& reg, const ModelConfig& c) {
      return std::make_unique<GatedMLA>(reg, "mla", c);
    };
  }
  dist::Comm world = dist::Comm::world();
};

TEST_F(ContextParallelMpi, KdaWithItsOwnDecays) {
  compare("KDA, initial decays", kda(), zig_zag(world.rank(), world.size()));
}
TEST_F(ContextParallelMpi, KdaWithSlowDecays) {
  compare("KDA, slow decays", kda(), zig_zag(world.rank(), world.size()), -8.f);
}
TEST_F(ContextParallelMpi, KdaAtTheGatesBound) {
  compare("KDA, decays at the bound", kda(), zig_zag(world.rank(), world.size()), 5.f);
}
// Documents of kT = 128 tokens: spans are 32 tokens at cp2, 16 at cp4. 32 is a span boundary
// (both), 47 one token before one (cp4), 5, 50, 66 and 100 lie inside spans, and the documents
// from 66 and from 100 cross rank boundaries.
const std::vector<int64_t> kDocs = {0, 5, 32, 47, 50, 66, 100};
TEST_F(ContextParallelMpi, KdaOnPackedDocumentsWithSlowDecays) {
  compare("KDA, packed documents, slow decays", kda(), zig_zag(world.rank(), world.size()), -8.f,
          kDocs);
}
TEST_F(ContextParallelMpi, KdaOnPackedDocumentsAtTheGatesBound) {
  compare("KDA, packed documents, decays at the bound", kda(), zig_zag(world.rank(), world.size()),
          5.f, kDocs);
}
// Gated MLA by ring attention over zig-zag chunks: every rank's queries meet every earlier chunk.
TEST_F(ContextParallelMpi, GatedMlaByRingAttention) {
  compare("gated MLA (ring)", mla(), zig_zag(world.rank(), world.size()));
}
TEST_F(ContextParallelMpi, GatedMlaOnPackedDocuments) {
  compare("gated MLA (ring), packed documents", mla(), zig_zag(world.rank(), world.size()),
          std::nullopt, kDocs);
}
// DeepSeek-V3's MLA (rotary q_r and k_r, no gate): a rank turns its two chunks by their positions
// in the whole sequence, or in their documents.
TEST_F(ContextParallelMpi, RotaryMlaByRingAttention) {
  compare("rotary MLA (ring)", mla(), zig_zag(world.rank(), world.size()), std::nullopt, {},
          "deepseek-v3-nano.json");
}
TEST_F(ContextParallelMpi, RotaryMlaOnPackedDocuments) {
  compare("rotary MLA (ring), packed documents", mla(), zig_zag(world.rank(), world.size()),
          std::nullopt, kDocs, "deepseek-v3-nano.json");
}

}  // namespace
}  // namespace k3::model
