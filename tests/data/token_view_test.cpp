#include "k3/data/token_view.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/test_util.h"
#include "k3/data/batcher.h"
#include "k3/data/validation_batches.h"

namespace k3::data {
namespace {

// 0..n-1 laid out as 16-bit, 32-bit, 16-bit pieces of uneven sizes.
struct MixedPieces {
  std::vector<uint16_t> a;
  std::vector<int32_t> b;
  std::vector<uint16_t> c;
  std::vector<int32_t> whole;
  TokenView view;

  explicit MixedPieces(int n) : whole(static_cast<size_t>(n)) {
    std::iota(whole.begin(), whole.end(), 0);
    for (int i = 0; i < n / 5; ++i) a.push_back(static_cast<uint16_t>(i));
    for (int i = n / 5; i < n / 2; ++i) b.push_back(i);
    for (int i = n / 2; i < n; ++i) c.push_back(static_cast<uint16_t>(i));
    view.append(a.data(), static_cast<int64_t>(a.size()), 2);
    view.append(b.data(), static_cast<int64_t>(b.size()), 4);
    view.append(c.data(), static_cast<int64_t>(c.size()), 2);
  }
};

TEST(TokenView, CopiesAcrossPiecesOfEitherWidth) {
  MixedPieces m(1000);
  ASSERT_EQ(m.view.size(), 1000);
  EXPECT_EQ(m.view.to_vector(), m.whole);
  for (int64_t start : {0, 150, 199, 200, 480, 499, 500, 990}) {
    const int64_t n = std::min<int64_t>(37, 1000 - start);
    std::vector<int32_t> out(static_cast<size_t>(n));
    m.view.copy(start, n, out.data());
    EXPECT_EQ(out, std::vector<int32_t>(m.whole.begin() + start, m.whole.begin() + start + n))
        << start;
    EXPECT_EQ(m.view[start], start);
  }
  EXPECT_NE(testing::error_of([&] { m.view[1000]; }), "");
  int32_t t;
  EXPECT_NE(testing::error_of([&] { m.view.copy(999, 2, &t); }), "");
}

// A batcher over pieces serves what it serves over the same tokens in one vector.
TEST(TokenView, BatchesOverPiecesMatchBatchesOverAVector) {
  MixedPieces m(3000);
  Batcher pieces(m.view, 3, 16, 7), vector(m.whole, 3, 16, 7);
  for (int step = 0; step < 200; ++step) {
    const Batch p = pieces.next(), v = vector.next();
    ASSERT_EQ(p.inputs, v.inputs) << step;
    ASSERT_EQ(p.targets, v.targets) << step;
  }
  const ValidationBatches vp(m.view, 4, 16), vv(m.whole, 4, 16);
  ASSERT_EQ(vp.num_batches(), vv.num_batches());
  for (int64_t i = 0; i < vp.num_batches(); ++i) EXPECT_EQ(vp.batch(i).inputs, vv.batch(i).inputs);
}

}  // namespace
}  // namespace k3::data
