#include "k3/data/batcher.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/threads.h"
#include "k3/data/validation_batches.h"

namespace k3::data {
namespace {

// Token i has value i, so a row's contents say where its window starts.
std::vector<int32_t> counting_tokens(int n) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

std::vector<Batch> take(Batcher& batcher, int count) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) batches.push_back(batcher.next());
  return batches;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].inputs, b[i].inputs) << "batch " << i;
    EXPECT_EQ(a[i].targets, b[i].targets) << "batch " << i;
  }
}

// Documents start at every row's first position and after each end token (an end token in a
// row's last input starts nothing in it: the next row starts anyway).
TEST(Batch, DocumentStartsFollowEndTokens) {
  constexpr int32_t kEnd = 9;
  const std::vector<int32_t> tokens = {1, kEnd, 2, 3, kEnd, kEnd, 4, 5, 6, kEnd, 7, 8, 1};
  Batch b;
  b.resize(2, 6);
  b.fill_row(0, tokens, 0);  // inputs 1 E 2 3 E E
  b.fill_row(1, tokens, 6);  // inputs 4 5 6 E 7 8
  EXPECT_EQ(document_starts(b, kEnd), (std::vector<int64_t>{0, 2, 5, 6, 10}));
}

}  // namespace

TEST(Batcher, RowsAreShiftedWindows) {
  const std::vector<int32_t> tokens = counting_tokens(1000);
  Batcher batcher(tokens, 4, 16, 1);
  const Batch b = batcher.next();
  ASSERT_EQ(b.rows, 4);
  ASSERT_EQ(b.inputs.size(), 64u);
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(b.inputs[r * 16 + t], b.starts[r] + t);
      EXPECT_EQ(b.targets[r * 16 + t], b.starts[r] + t + 1);
    }
}

TEST(Batcher, DeterministicAndIndependentOfThreads) {
  const std::vector<int32_t> tokens = counting_tokens(5000);
  set_num_threads(1);
  Batcher one(tokens, 8, 32, 42);
  const std::vector<Batch> first = take(one, 40);
  set_num_threads(2);
  Batcher two(tokens, 8, 32, 42);
  expect_same(first, take(two, 40));
  set_num_threads();
  Batcher other_seed(tokens, 8, 32, 43);
  EXPECT_NE(other_seed.next().inputs, first[0].inputs);
}

TEST(Batcher, ResumesFromACursorBitIdentically) {
  const std::vector<int32_t> tokens = counting_tokens(3001);
  Batcher straight(tokens, 5, 20, 7);
  const std::vector<Batch> all = take(straight, 60);  // crosses several epochs

  Batcher interrupted(tokens, 5, 20, 7);
  take(interrupted, 23);
  const std::string saved = interrupted.cursor().to_string();

  Batcher resumed(tokens, 5, 20, 7);
  resumed.seek(DataCursor::parse(saved));
  expect_same(std::vector<Batch>(all.begin() + 23, all.end()), take(resumed, 37));
  EXPECT_EQ(resumed.cursor(), straight.cursor());
}

TEST(Batcher, EveryEpochServesEachWindowOnceInANewOrder) {
  const std::vector<int32_t> tokens = counting_tokens(4000);
  const int64_t seq_len = 50;
  Batcher batcher(tokens, 1, seq_len, 3);
  const int64_t windows = batcher.windows_per_epoch();
  EXPECT_EQ(windows, (4000 - seq_len) / seq_len);
  std::vector<std::vector<int64_t>> epochs(3);
  for (auto& starts : epochs) {
    for (int64_t i = 0; i < windows; ++i) starts.push_back(batcher.next().starts[0]);
    const std::set<int64_t> distinct(starts.begin(), starts.end());
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), windows);
    for (int64_t s : starts) {
      EXPECT_EQ(s % seq_len, starts[0] % seq_len);  // one offset per epoch
      EXPECT_LE(s + seq_len + 1, 4000);
    }
  }
  EXPECT_EQ(batcher.cursor(), (DataCursor{3, 0}));
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(Batcher, CursorCountsWindowsAcrossEpochs) {
  const std::vector<int32_t> tokens = counting_tokens(1001);
  Batcher batcher(tokens, 3, 10, 0);
  const int64_t windows = batcher.windows_per_epoch();
  take(batcher, 50);
  EXPECT_EQ(batcher.cursor(), (DataCursor{150 / windows, 150 % windows}));
}

TEST(Batcher, RejectsBadShapesAndCursors) {
  const std::vector<int32_t> tokens = counting_tokens(100);
  try {
    Batcher(tokens, 2, 100, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.context().field, "seq_len");
  }
  EXPECT_THROW(Batcher(tokens, 0, 10, 0), Error);
  Batcher batcher(tokens, 2, 10, 0);
  EXPECT_THROW(batcher.seek({0, batcher.windows_per_epoch()}), Error);
  EXPECT_THROW(batcher.seek({-1, 0}), Error);
  Batcher tight(tokens, 2, 99, 0);  // exactly one window
  EXPECT_EQ(tight.windows_per_epoch(), 1);
  EXPECT_EQ(tight.next().starts, (std::vector<int64_t>{0, 0}));
}

TEST(DataCursor, RoundTripsThroughText) {
  const DataCursor c{12, 3456};
  EXPECT_EQ(c.to_string(), "12:3456");
  EXPECT_EQ(DataCursor::parse("12:3456"), c);
  for (const char* bad : {"", "12", "12:", ":3", "a:1", "1:-2", "1:2:3", "1:2x"}) {
    EXPECT_THROW(DataCursor::parse(bad), Error) << bad;
  }
}

TEST(ValidationBatches, WalkTheStreamInOrder) {
  const std::vector<int32_t> tokens = counting_tokens(1000);
  ValidationBatches val(tokens, 4, 64);
  EXPECT_EQ(val.num_windows(), 999 / 64);
  EXPECT_EQ(val.num_batches(), 4);
  int64_t window = 0;
  for (int64_t i = 0; i < val.num_batches(); ++i) {
    const Batch b = val.batch(i);
    for (int64_t r = 0; r < b.rows; ++r, ++window) {
      EXPECT_EQ(b.starts[r], window * 64);
      EXPECT_EQ(b.targets[r * 64 + 63], window * 64 + 64);
    }
  }
  EXPECT_EQ(window, val.num_windows());
  EXPECT_EQ(val.batch(3).rows, 3);
  EXPECT_THROW(val.batch(4), Error);
}

}  // namespace k3::data
