#include "k3/kernels/moe_permute.h"

#include <cstring>
#include <tuple>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/moe_reference.h"

namespace k3 {
namespace {

using kernels::MoePermutePlan;
using testing::cast_vec;
using testing::random_vec;

// A plan with its own storage.
struct Plan {
  std::vector<int64_t> offsets, pair_of_row, row_of_pair;
  MoePermutePlan p;
  Plan(int64_t tokens, int64_t k, int64_t experts)
      : offsets(experts + 1, -1),
        pair_of_row(tokens * k, -1),
        row_of_pair(tokens * k, -1),
        p{tokens, k, experts, offsets.data(), pair_of_row.data(), row_of_pair.data()} {}
};

TEST(MoePermute, PlanIsAStableSortByExpert) {
  // Hand-checked: 3 tokens, k = 2, 4 experts; expert 2 gets nothing.
  const std::vector<int32_t> ids = {1, 3, 0, 1, 3, 0};
  Plan plan(3, 2, 4);
  kernels::moe_permute_plan(ids.data(), plan.p);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 2, 4, 4, 6}));
  EXPECT_EQ(plan.pair_of_row, (std::vector<int64_t>{2, 5, 0, 3, 1, 4}));
  EXPECT_EQ(plan.row_of_pair, (std::vector<int64_t>{2, 4, 0, 3, 5, 1}));
  EXPECT_EQ(plan.p.rows(2), 0);
}

// Ids are drawn from the even experts only (repeats within a token are allowed: the kernels do
// not need top-k's distinct experts), so half of the experts receive no token.
TEST(MoePermute, PlanMatchesReferenceWithIdleExperts) {
  for (auto [tokens, k, experts] :
       {std::tuple<int64_t, int64_t, int64_t>{0, 2, 4}, {1, 1, 2}, {37, 3, 16}, {300, 8, 64}}) {
    const auto ids = testing::random_tokens(tokens * k, static_cast<int32_t>(experts / 2), tokens);
    std::vector<int32_t> even(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) even[i] = 2 * ids[i];  // odd experts stay idle
    Plan fast(tokens, k, experts), ref(tokens, k, experts);
    kernels::moe_permute_plan(even.data(), fast.p);
    ref::moe_permute_plan(even.data(), ref.p);
    EXPECT_EQ(fast.offsets, ref.offsets);
    EXPECT_EQ(fast.pair_of_row, ref.pair_of_row);
    EXPECT_EQ(fast.row_of_pair, ref.row_of_pair);
    if (tokens > 0) {
      EXPECT_EQ(fast.p.rows(1), 0);
    }
  }
}

TEST(MoePermute, RejectsAnExpertOutOfRange) {
  const std::vector<int32_t> ids = {0, 4};
  Plan plan(1, 2, 4);
  EXPECT_THROW(kernels::moe_permute_plan(ids.data(), plan.p), Error);
}

// The four data kernels against the double reference, at a size that runs in parallel.
TEST(MoePermute, GatherCombineAndBackwardsMatchReference) {
  const int64_t tokens = 300, k = 4, experts = 12, dim = 40, pairs = tokens * k;
  const auto raw = testing::random_tokens(pairs, static_cast<int32_t>(experts / 2), 7);
  std::vector<int32_t> ids(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) ids[i] = 2 * raw[i];
  Plan plan(tokens, k, experts);
  kernels::moe_permute_plan(ids.data(), plan.p);
  const auto x = random_vec(tokens * dim, 1), w = random_vec(pairs, 2),
             rows = random_vec(pairs * dim, 3);
  const auto dout = random_vec(tokens * dim, 4), drows = random_vec(pairs * dim, 5);
  const auto xd = cast_vec<double>(x), wd = cast_vec<double>(w), rowsd = cast_vec<double>(rows);
  const auto doutd = cast_vec<double>(dout), drowsd = cast_vec<double>(drows);

  std::vector<float> g(pairs * dim), dx(tokens * dim), out(tokens * dim), dr(pairs * dim),
      dw(pairs);
  std::vector<double> g_r(pairs * dim), dx_r(tokens * dim), out_r(tokens * dim), dr_r(pairs * dim),
      dw_r(pairs);
  kernels::moe_permute(plan.p, x.data(), dim, g.data());
  ref::moe_permute(plan.p, xd.data(), dim, g_r.data());
  EXPECT_EQ(cast_vec<double>(g), g_r);  // a copy
  kernels::moe_permute_backward(plan.p, drows.data(), dim, dx.data());
  ref::moe_permute_backward(plan.p, drowsd.data(), dim, dx_r.data());
  K3_EXPECT_CLOSE(dx, dx_r, 1e-6, 1e-6);
  kernels::moe_unpermute(plan.p, rows.data(), w.data(), dim, out.data());
  ref::moe_unpermute(plan.p, rowsd.data(), wd.data(), dim, out_r.data());
  K3_EXPECT_CLOSE(out, out_r, 1e-6, 1e-6);
  kernels::moe_unpermute_backward(plan.p, rows.data(), w.data(), dout.data(), dim, dr.data(),
                                  dw.data());
  ref::moe_unpermute_backward(plan.p, rowsd.data(), wd.data(), doutd.data(), dim, dr_r.data(),
                              dw_r.data());
  K3_EXPECT_CLOSE(dr, dr_r, 1e-6, 1e-6);
  K3_EXPECT_CLOSE(dw, dw_r, 1e-5, 1e-5);

  // Each backward is the adjoint of its forward: <A x, y> = <x, Aᵀ y>.
  std::vector<double> gx(pairs * dim), aty(tokens * dim);
  ref::moe_permute(plan.p, xd.data(), dim, gx.data());
  ref::moe_permute_backward(plan.p, drowsd.data(), dim, aty.data());
  EXPECT_NEAR(testing::dot(gx, drowsd), testing::dot(xd, aty), 1e-9);
  EXPECT_NEAR(testing::dot(out_r, doutd), testing::dot(rowsd, dr_r), 1e-9);
}

TEST(MoePermute, ResultsDoNotDependOnTheThreadCount) {
  const int64_t tokens = 500, k = 6, experts = 32, dim = 24, pairs = tokens * k;
  const auto ids = testing::random_tokens(pairs, static_cast<int32_t>(experts), 9);
  Plan plan(tokens, k, experts);
  kernels::moe_permute_plan(ids.data(), plan.p);
  const auto drows = random_vec(pairs * dim, 1), rows = random_vec(pairs * dim, 2);
  const auto w = random_vec(pairs, 3), dout = random_vec(tokens * dim, 4);
  auto run = [&](int threads) {
    testing::ScopedThreads scoped(threads);
    std::vector<float> dx(tokens * dim), out(tokens * dim), dr(pairs * dim), dw(pairs);
    kernels::moe_permute_backward(plan.p, drows.data(), dim, dx.data());
    kernels::moe_unpermute(plan.p, rows.data(), w.data(), dim, out.data());
    kernels::moe_unpermute_backward(plan.p, rows.data(), w.data(), dout.data(), dim, dr.data(),
                                    dw.data());
    dx.insert(dx.end(), out.begin(), out.end());
    dx.insert(dx.end(), dr.begin(), dr.end());
    dx.insert(dx.end(), dw.begin(), dw.end());
    return dx;
  };
  const auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace k3
