#include "k3/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/gemm.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using kernels::LmHeadCeArgs;
using kernels::LossSum;
using testing::cast_vec;
using testing::random_tokens;
using testing::random_vec;

constexpr int32_t kIgnore = -100;

std::vector<int32_t> targets_with_ignored(int64_t n, int32_t V, uint64_t seed) {
  auto t = random_tokens(n, V, seed);
  for (int64_t i = 0; i < n; i += 5) t[i] = kIgnore;
  return t;
}

// Naive log-softmax in double: loss sum and (softmax - onehot) * scale per counted row.
double naive_cross_entropy(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                           int64_t V, double scale, std::vector<double>& grad) {
  const int64_t N = static_cast<int64_t>(targets.size());
  grad.assign(N * V, 0.0);
  double loss = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] == kIgnore) continue;
    const float* x = logits.data() + i * V;
    const double mx = *std::max_element(x, x + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
    const double lse = mx + std::log(sum);
    loss += lse - x[targets[i]];
    for (int64_t j = 0; j < V; ++j) grad[i * V + j] = std::exp(x[j] - lse) * scale;
    grad[i * V + targets[i]] -= scale;
  }
  return loss;
}

TEST(CrossEntropy, MatchesNaiveLogSoftmax) {
  struct Case {
    int64_t N, V;
    double offset;  // added to every logit: the log-softmax must not overflow
  };
  for (const Case& c : {Case{1, 1, 0}, Case{3, 2, 0}, Case{17, 101, 0}, Case{64, 3000, 0},
                        Case{9, 40, 800}, Case{9, 40, -800}}) {
    auto logits = random_vec(c.N * c.V, c.N * c.V, c.offset - 8, c.offset + 8);
    const auto targets = targets_with_ignored(c.N, static_cast<int32_t>(c.V), c.N);
    const float scale = 0.37f;
    std::vector<double> grad_r;
    const double loss_r = naive_cross_entropy(logits, targets, c.V, scale, grad_r);
    const LossSum loss = kernels::cross_entropy_forward_backward(logits.data(), targets.data(), c.N,
                                                                 c.V, kIgnore, scale);
    EXPECT_EQ(loss.count, std::count_if(targets.begin(), targets.end(),
                                        [](int32_t t) { return t != kIgnore; }));
    EXPECT_NEAR(loss.sum, loss_r, 1e-6 * (1 + std::abs(loss_r))) << "N=" << c.N << " V=" << c.V;
    K3_EXPECT_CLOSE(logits, grad_r, 1e-7, 1e-5);
    for (int64_t i = 0; i < c.N; ++i) {
      if (targets[i] != kIgnore) continue;
      for (int64_t j = 0; j < c.V; ++j) ASSERT_EQ(logits[i * c.V + j], 0.0f);
    }
  }
}

// The vocabulary-parallel pieces, the logits cut into 1 to 5 shards (uneven ones too): the loss
// and every shard's gradient equal the whole rows' cross-entropy; with one shard, bit for bit.
TEST(CrossEntropy, VocabularyShardsMatchTheWholeRows) {
  const int64_t N = 23, V = 97;
  const auto logits = random_vec(N * V, 3, -6, 6);
  const auto targets = targets_with_ignored(N, static_cast<int32_t>(V), 4);
  const float scale = 0.3f;
  std::vector<float> want = logits;
  const LossSum want_loss =
      kernels::cross_entropy_forward_backward(want.data(), targets.data(), N, V, kIgnore, scale);
  for (int64_t shards = 1; shards <= 5; ++shards) {
    // Shard k holds columns [bound(k), bound(k + 1)).
    auto bound = [&](int64_t k) { return k * V / shards + (k > 0 && k < shards ? 1 : 0); };
    std::vector<float> stats(shards * N * kernels::kCeStats), norm(N * 2);
    std::vector<std::vector<float>> parts;
    for (int64_t k = 0; k < shards; ++k) {
      const kernels::VocabRange r{bound(k), bound(k + 1) - bound(k), V};
      std::vector<float>& part = parts.emplace_back(N * r.size);
      for (int64_t i = 0; i < N; ++i)
        std::copy_n(logits.begin() + i * V + r.first, r.size, part.begin() + i * r.size);
      kernels::ce_shard_stats(part.data(), targets.data(), N, r, kIgnore,
                              stats.data() + k * N * kernels::kCeStats);
    }
    const LossSum loss =
        kernels::ce_combine(stats.data(), shards, targets.data(), N, kIgnore, norm.data());
    EXPECT_EQ(loss.count, want_loss.count);
    EXPECT_NEAR(loss.sum, want_loss.sum, 1e-6 * want_loss.sum) << shards << " shards";
    std::vector<float> grad(N * V);
    for (int64_t k = 0; k < shards; ++k) {
      const kernels::VocabRange r{bound(k), bound(k + 1) - bound(k), V};
      kernels::ce_shard_grad(parts[k].data(), targets.data(), N, r, norm.data(), kIgnore, scale);
      for (int64_t i = 0; i < N; ++i)
        std::copy_n(parts[k].begin() + i * r.size, r.size, grad.begin() + i * V + r.first);
    }
    K3_EXPECT_CLOSE(grad, want, 1e-8, 1e-5);
    if (shards == 1) {
      EXPECT_EQ(grad, want);
      EXPECT_EQ(loss.sum, want_loss.sum);
    }
  }
}

TEST(CrossEntropy, RejectsTargetOutsideVocabulary) {
  std::vector<float> logits(6);
  const std::vector<int32_t> bad = {1, 3};
  EXPECT_THROW(kernels::cross_entropy_forward_backward(logits.data(), bad.data(), 2, 3, kIgnore, 1),
               Error);
}

// The double reference's gradients against finite differences of its own loss.
TEST(LmHeadCrossEntropy, ReferenceMatchesFiniteDifferences) {
  const int64_t N = 6, d = 4, V = 5;
  const double scale = 0.5;
  const auto h = random_vec<double>(N * d, 1), w = random_vec<double>(V * d, 2);
  const auto targets = targets_with_ignored(N, V, 3);
  auto loss = [&](const std::vector<double>& hh, const std::vector<double>& ww) {
    return scale * ref::lm_head_cross_entropy<double>(hh.data(), ww.data(), targets.data(), N, d, V,
                                                      kIgnore, scale, nullptr, nullptr, nullptr);
  };
  const auto fd_h = testing::finite_difference([&](const auto& hh) { return loss(hh, w); }, h);
  const auto fd_w = testing::finite_difference([&](const auto& ww) { return loss(h, ww); }, w);
  std::vector<double> dh(N * d), dw(V * d, 0.0);
  int64_t count = 0;
  ref::lm_head_cross_entropy<double>(h.data(), w.data(), targets.data(), N, d, V, kIgnore, scale,
                                     dh.data(), dw.data(), &count);
  EXPECT_EQ(count, N - 2);
  K3_EXPECT_CLOSE(dh, fd_h, 1e-8, 1e-6);
  K3_EXPECT_CLOSE(dw, fd_w, 1e-8, 1e-6);
}

struct LmHeadProblem {
  int64_t N, d, V;
  std::vector<float> h, w, dw0;
  std::vector<int32_t> targets;
  float scale;

  LmHeadProblem(int64_t n, int64_t dd, int64_t v, uint64_t seed)
      : N(n),
        d(dd),
        V(v),
        h(random_vec(n * dd, seed)),
        w(random_vec(v * dd, seed + 1)),
        dw0(random_vec(v * dd, seed + 2)),
        targets(targets_with_ignored(n, int32_t(v), seed + 3)),
        scale(1.0f / float(n)) {}

  // Fused: dw starts at dw0 (accumulation), dh is written.
  LossSum fused(int64_t chunk, std::vector<float>& dh, std::vector<float>& dw) const {
    std::vector<float> workspace(chunk * V);
    dh.assign(N * d, NAN);
    dw = dw0;
    return kernels::lm_head_cross_entropy(LmHeadCeArgs{h.data(), w.data(), targets.data(), N, d, V,
                                                       kIgnore, scale, chunk, workspace.data(),
                                                       dh.data(), dw.data()});
  }

  // Unfused: the whole [N, V] logits, same kernels.
  LossSum unfused(std::vector<float>& dh, std::vector<float>& dw) const {
    std::vector<float> logits(N * V);
    kernels::gemm(false, true, N, V, d, 1.0f, h.data(), w.data(), 0.0f, logits.data());
    const LossSum loss = kernels::cross_entropy_forward_backward(logits.data(), targets.data(), N,
                                                                 V, kIgnore, scale);
    dh.assign(N * d, 0.0f);
    dw = dw0;
    kernels::gemm(false, false, N, d, V, 1.0f, logits.data(), w.data(), 0.0f, dh.data());
    kernels::gemm(true, false, V, d, N, 1.0f, logits.data(), h.data(), 1.0f, dw.data());
    return loss;
  }
};

TEST(LmHeadCrossEntropy, FusedEqualsUnfusedForEveryChunking) {
  const LmHeadProblem p(36, 16, 53, 10);
  std::vector<float> dh_u, dw_u;
  const LossSum unfused = p.unfused(dh_u, dw_u);
  // Double reference: checks the unfused path too, and that dw accumulated onto dw0.
  std::vector<double> dh_r(p.N * p.d), dw_r = cast_vec<double>(p.dw0);
  int64_t count_r = 0;
  const double loss_r = ref::lm_head_cross_entropy<double>(
      cast_vec<double>(p.h).data(), cast_vec<double>(p.w).data(), p.targets.data(), p.N, p.d, p.V,
      kIgnore, p.scale, dh_r.data(), dw_r.data(), &count_r);
  EXPECT_EQ(unfused.count, count_r);
  EXPECT_NEAR(unfused.sum, loss_r, 1e-5 * loss_r);
  K3_EXPECT_CLOSE(dh_u, dh_r, 1e-6, 1e-5);
  K3_EXPECT_CLOSE(dw_u, dw_r, 1e-6, 1e-5);

  for (int64_t chunk : {1, 4, 5, 36, 100}) {  // 4 divides N, 5 does not, 100 > N
    std::vector<float> dh, dw;
    const LossSum fused = p.fused(chunk, dh, dw);
    EXPECT_EQ(fused.count, unfused.count) << "chunk=" << chunk;
    // GEMM blocking depends on the chunk: the logits may differ in the last bit.
    EXPECT_NEAR(fused.sum, unfused.sum, 1e-7 * unfused.sum) << "chunk=" << chunk;
    K3_EXPECT_CLOSE(dh, dh_u, 1e-7, 1e-6) << "chunk=" << chunk;
    K3_EXPECT_CLOSE(dw, dw_u, 1e-6, 1e-6) << "chunk=" << chunk;
  }
}

TEST(LmHeadCrossEntropy, LossOnlyWithoutGradients) {
  const LmHeadProblem p(11, 8, 9, 20);
  std::vector<float> dh, dw, workspace(3 * p.V);
  const LossSum with = p.fused(3, dh, dw);
  const LossSum without =
      kernels::lm_head_cross_entropy(LmHeadCeArgs{p.h.data(), p.w.data(), p.targets.data(), p.N,
                                                  p.d, p.V, kIgnore, p.scale, 3, workspace.data()});
  EXPECT_EQ(with.sum, without.sum);
  EXPECT_EQ(with.count, without.count);
}

TEST(LmHeadCrossEntropy, DeterministicBitForBit) {
  const LmHeadProblem p(200, 64, 500, 30);
  std::vector<float> dh1, dw1, dh2, dw2;
  const LossSum a = p.fused(48, dh1, dw1), b = p.fused(48, dh2, dw2);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(dh1, dh2);
  EXPECT_EQ(dw1, dw2);
}

TEST(LmHeadCrossEntropy, RejectsBadArguments) {
  const LmHeadProblem p(4, 2, 3, 40);
  std::vector<float> workspace(p.V);
  LmHeadCeArgs a{p.h.data(), p.w.data(), p.targets.data(), p.N, p.d, p.V, kIgnore, 1, 1, nullptr};
  EXPECT_THROW(kernels::lm_head_cross_entropy(a), Error);  // no workspace
  a.workspace = workspace.data();
  a.chunk = 0;
  EXPECT_THROW(kernels::lm_head_cross_entropy(a), Error);
}

TEST(LmHeadCrossEntropy, BadTargetThrowsBeforeTouchingGradients) {
  LmHeadProblem p(6, 2, 3, 50);
  p.targets.back() = 3;  // outside the vocabulary, in the last chunk
  std::vector<float> dh, dw;
  EXPECT_THROW(p.fused(2, dh, dw), Error);
  EXPECT_EQ(dw, p.dw0);
}

}  // namespace
}  // namespace k3
