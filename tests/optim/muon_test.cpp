#include "k3/optim/muon.h"

#include <tuple>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "optim/linalg.h"

namespace k3::optim {
namespace {

using testing::Mat;
using testing::random_vec;

// Flat value and gradient buffers holding the given tensors one after another.
struct Buffers {
  std::vector<float> values, grads;
  std::vector<ParamSlot> slots;
  explicit Buffers(const std::vector<std::pair<std::string, Shape>>& tensors, uint64_t seed = 1) {
    size_t offset = 0;
    for (const auto& [name, shape] : tensors) {
      slots.push_back({name, shape, offset});
      offset += static_cast<size_t>(shape_numel(shape));
    }
    values = random_vec(offset, seed);
    grads.assign(offset, 0.0f);
  }
  ParamSet set() { return {slots, values.data(), grads.data(), values.size()}; }
  // In place: the optimizer holds pointers into the buffers.
  void draw_grads(uint64_t seed) {
    const auto g = random_vec(grads.size(), seed, -1, 1);
    std::copy(g.begin(), g.end(), grads.begin());
  }
};

std::vector<float> to_vec(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

constexpr MuonConfig kConfig{0.95f, 0.1f, 5};
constexpr float kLr = 0.02f, kGradScale = 0.5f;

// One Muon step on one matrix in double, exactly as math §7 writes it.
void reference_step(Mat& w, Mat& momentum, const Mat& grad) {
  const int64_t r = w.rows, c = w.cols;
  Mat v(r, c);
  for (size_t i = 0; i < w.v.size(); ++i) {
    const double g = grad.v[i] * kGradScale;
    momentum.v[i] = kConfig.momentum * momentum.v[i] + g;
    v.v[i] = g + kConfig.momentum * momentum.v[i];
  }
  const bool transposed = r > c;
  Mat wide(transposed ? c : r, transposed ? r : c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) (transposed ? wide(j, i) : wide(i, j)) = v(i, j);
  const Mat x = testing::newton_schulz_reference(wide);
  const double scale = 0.2 * std::sqrt(static_cast<double>(std::max(r, c)));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      w(i, j) -= kLr * (scale * (transposed ? x(j, i) : x(i, j)) + kConfig.weight_decay * w(i, j));
}

TEST(Muon, MatchesTheSpecInDouble) {
  for (Shape shape : {Shape{24, 40}, Shape{40, 24}}) {  // wide, and tall (transposed)
    Buffers b({{"w", shape}});
    Muon muon(b.set(), {0}, kConfig);
    Mat w(shape[0], shape[1]), m(shape[0], shape[1]), g(shape[0], shape[1]);
    std::copy(b.values.begin(), b.values.end(), w.v.begin());
    for (int step = 0; step < 3; ++step) {
      b.draw_grads(50 + static_cast<uint64_t>(step));
      std::copy(b.grads.begin(), b.grads.end(), g.v.begin());
      muon.step(kLr, kGradScale);
      reference_step(w, m, g);
    }
    K3_EXPECT_CLOSE(b.values, w.v, 1e-5, 0);
    K3_EXPECT_CLOSE(to_vec(muon.state_tensors()[0].second), m.v, 1e-6, 1e-6);
  }
}

// Runs `steps` steps of `muon` on `b` with gradients drawn from `seed`.
void run(Muon& muon, Buffers& b, int steps, uint64_t seed) {
  for (int s = 0; s < steps; ++s) {
    b.draw_grads(seed + static_cast<uint64_t>(s));
    muon.step(kLr, kGradScale);
  }
}

// Per-Head Muon on a [H·h, n] projection is whole-matrix Muon on each head's [h, n] rows as its
// own tensor. Both layouts hold the same numbers in the same order, so they run the same steps;
// only the GEMM batching differs, which may change rounding, not results beyond it.
TEST(Muon, PerHeadEqualsWholeMatrixMuonOnEachHead) {
  for (auto [heads, h, n] : {std::tuple<int64_t, int64_t, int64_t>{4, 8, 24}, {3, 16, 8}}) {
    Buffers fused({{"proj", {heads * h, n}}});
    std::vector<std::pair<std::string, Shape>> separate_shapes;
    for (int64_t i = 0; i < heads; ++i)
      separate_shapes.push_back({"head" + std::to_string(i), {h, n}});
    Buffers separate(separate_shapes);
    ASSERT_EQ(fused.values, separate.values);
    Muon per_head(fused.set(), {h}, kConfig);
    Muon whole(separate.set(), std::vector<int64_t>(static_cast<size_t>(heads), 0), kConfig);
    run(per_head, fused, 3, 7);
    run(whole, separate, 3, 7);
    K3_EXPECT_CLOSE(fused.values, separate.values, 1e-6, 0);
  }
}

// Experts of equal shape run as one batch; the result equals orthogonalizing them one at a time,
// and a stacked [E, m, n] tensor split per expert equals E separate tensors.
TEST(Muon, PerExpertBatchingEqualsOneAtATime) {
  constexpr int64_t kExperts = 6, kSize = 12 * 20;
  std::vector<std::pair<std::string, Shape>> shapes;
  for (int64_t e = 0; e < kExperts; ++e) shapes.push_back({"expert" + std::to_string(e), {12, 20}});
  Buffers batched(shapes), stacked({{"experts", {kExperts, 12, 20}}});
  const std::vector<float> initial = batched.values;
  Muon together(batched.set(), std::vector<int64_t>(kExperts, 0), kConfig);
  Muon per_expert(stacked.set(), {12}, kConfig);
  run(together, batched, 3, 11);
  run(per_expert, stacked, 3, 11);
  K3_EXPECT_CLOSE(stacked.values, batched.values, 1e-6, 0);

  for (int64_t e = 0; e < kExperts; ++e) {
    auto expert = [e](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + e * kSize, all.begin() + (e + 1) * kSize);
    };
    Buffers one({{"expert", {12, 20}}});
    one.values = expert(initial);
    Muon alone(one.set(), {0}, kConfig);
    for (int s = 0; s < 3; ++s) {
      const auto g = expert(random_vec(kExperts * kSize, 11 + static_cast<uint64_t>(s), -1, 1));
      std::copy(g.begin(), g.end(), one.grads.begin());
      alone.step(kLr, kGradScale);
    }
    K3_EXPECT_CLOSE(one.values, expert(batched.values), 1e-6, 0) << "expert " << e;
  }
}

// A block stored as column panels (each rank's part of a column-split matrix) gives X in the
// same panels and the row-major momentum, bit for bit as the row-major block: wide and tall
// (transposed) blocks, two panel widths.
TEST(Muon, OrthogonalizerTakesColumnPanels) {
  for (const auto& [rows, cols, panel] :
       {std::tuple<int64_t, int64_t, int64_t>{6, 12, 4}, {6, 12, 6}, {20, 8, 2}, {20, 8, 4}}) {
    const int64_t size = rows * cols;
    // Element (r, c) of the block in the panel layout.
    auto at = [&](int64_t r, int64_t c) {
      return (c / panel) * rows * panel + r * panel + c % panel;
    };
    const std::vector<float> g = random_vec(static_cast<size_t>(2 * size), 3, -1, 1);
    std::vector<float> g_panels(g.size()), m(g.size(), 0.5f), m_panels(m);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          g_panels[static_cast<size_t>(b * size + at(r, c))] =
              g[static_cast<size_t>(b * size + r * cols + c)];
    MuonOrthogonalizer plain(0.9f, 5), panels(0.9f, 5);
    std::vector<float> x(g.size()), x_panels(g.size());
    const std::vector<MuonOrthogonalizer::Input> in = {{g.data(), m.data()},
                                                       {g.data() + size, m.data() + size}};
    const std::vector<MuonOrthogonalizer::Input> in_panels = {
        {g_panels.data(), m_panels.data()}, {g_panels.data() + size, m_panels.data() + size}};
    plain.run(rows, cols, in, 0.5f, x.data());
    panels.run(rows, cols, in_panels, 0.5f, x_panels.data(), panel);
    EXPECT_EQ(m, m_panels) << rows << "x" << cols << " in panels of " << panel;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(x_panels[static_cast<size_t>(b * size + at(r, c))],
                    x[static_cast<size_t>(b * size + r * cols + c)])
              << rows << "x" << cols << " in panels of " << panel << ", (" << r << ", " << c << ")";
  }
  MuonOrthogonalizer o(0.9f, 5);
  std::vector<float> g(24, 1.0f), m(24, 0.0f), x(24);
  const std::vector<MuonOrthogonalizer::Input> in = {{g.data(), m.data()}};
  EXPECT_THROW(o.run(4, 6, in, 1.0f, x.data(), 4), Error);
}

TEST(Muon, RejectsVectorsAndBlocksThatDoNotTile) {
  Buffers vec({{"norm", {16}}}), mat({{"proj", {12, 8}}});
  EXPECT_THROW(Muon(vec.set(), {0}, kConfig), Error);
  EXPECT_THROW(Muon(mat.set(), {5}, kConfig), Error);
}

}  // namespace
}  // namespace k3::optim
