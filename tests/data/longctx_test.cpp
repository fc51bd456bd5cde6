#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "k3/base/error.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/corpus.h"
#include "k3/data/longctx/oracle.h"
#include "k3/data/longctx/task.h"
#include "k3/data/random_draws.h"

namespace k3::data {
namespace {

// Base documents from the built-in corpus: a few hundred short English-like documents.
const std::vector<std::vector<int32_t>>& documents() {
  static const std::vector<std::vector<int32_t>> docs = [] {
    ByteTokenizer tok;
    Corpus corpus(5);
    std::vector<std::vector<int32_t>> d;
    for (int64_t i = 0; i < 600; ++i) d.push_back(tok.encode(corpus.document(i)));
    return d;
  }();
  return docs;
}
const BaseDocuments& base() {
  static const BaseDocuments b(documents());
  return b;
}

std::vector<LongTask> tasks(std::vector<int64_t> lengths, int64_t per_length, uint64_t seed) {
  return synthesize_long_tasks(base(), ByteTokenizer(), lengths, per_length, seed);
}

std::string text(std::span<const int32_t> ids) { return ByteTokenizer().decode(ids); }
std::span<const int32_t> context(const LongTask& t) {
  return std::span(t.tokens).first(static_cast<size_t>(t.question_offset));
}
std::string question(const LongTask& t) {
  return text(
      std::span(t.tokens).subspan(static_cast<size_t>(t.question_offset),
                                  static_cast<size_t>(t.answer_offset - t.question_offset)));
}

// The oracle's score on each task seeing only PART(task) of its context, then the question.
template <typename Part>
double oracle_accuracy(const std::vector<LongTask>& ts, Part part) {
  int right = 0;
  for (const LongTask& t : ts) right += solve_long_task(part(t) + question(t)) == t.answer;
  return static_cast<double>(right) / static_cast<double>(ts.size());
}

TEST(LongCtx, SameSeedSameTasks) {
  const auto a = tasks({1024, 4096}, 6, 11), b = tasks({1024, 4096}, 6, 11),
             c = tasks({1024}, 6, 12);
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].depth, b[i].depth);
  }
  // A length's tasks do not depend on the other lengths asked for; another seed changes them.
  const auto alone = tasks({4096}, 6, 11);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(alone[i].tokens, a[6 + i].tokens);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(c[i].answer, a[i].answer) << "names and numbers too";
}

TEST(LongCtx, LengthsKindsAndAnswerSpans) {
  const auto ts = tasks({1024, 4096, 16384}, 6, 3);
  for (size_t i = 0; i < ts.size(); ++i) {
    const LongTask& t = ts[i];
    EXPECT_EQ(t.length(), (std::vector<int64_t>{1024, 4096, 16384}[i / 6]));
    EXPECT_EQ(t.kind, static_cast<LongTaskKind>(i % 3));
    EXPECT_EQ(t.answer_offset + t.answer_length, t.length()) << "the answer ends the document";
    EXPECT_EQ(text(std::span(t.tokens).subspan(static_cast<size_t>(t.answer_offset))), t.answer);
    EXPECT_TRUE(question(t).starts_with("\nQuestion: ")) << question(t);
    EXPECT_TRUE(question(t).ends_with("\nAnswer:"));
  }
}

TEST(LongCtx, OracleNeedsTheWholeContext) {
  const auto ts = tasks({1024, 4096}, 30, 7);
  EXPECT_EQ(oracle_accuracy(ts, [](const LongTask& t) { return text(context(t)); }), 1.0);
  // Half the context: its first half, or 8 of its 16 chunks chosen at random (kept in order).
  const double prefix = oracle_accuracy(ts, [](const LongTask& t) {
    return text(context(t).first(static_cast<size_t>(t.question_offset / 2)));
  });
  RandomDraws draws(1, 0);
  const double half = oracle_accuracy(ts, [&](const LongTask& t) {
    std::vector<int> chunks(16);
    for (int i = 0; i < 16; ++i) chunks[i] = i;
    for (int i = 15; i > 0; --i) std::swap(chunks[i], chunks[draws.below(i + 1)]);
    std::sort(chunks.begin(), chunks.begin() + 8);
    std::string kept;
    const size_t n = static_cast<size_t>(t.question_offset);
    for (int k = 0; k < 8; ++k)
      kept += text(
          context(t).subspan(n * chunks[k] / 16, n * (chunks[k] + 1) / 16 - n * chunks[k] / 16));
    return kept;
  });
  // Over seeds 1-20 (60 tasks each) the prefix answered at most 0.033, the random half 0.133.
  EXPECT_LE(prefix, 0.1) << prefix;
  EXPECT_LE(half, 0.2) << half;
  std::printf("oracle accuracy: prefix %.3f, random half %.3f\n", prefix, half);
}

// The depth names the answer's deepest piece: from its first token on, the context answers; a
// few tokens past it, that piece is cut and it does not.
TEST(LongCtx, DepthIsTheDeepestNeededPiece) {
  const auto ts = tasks({1024, 4096}, 30, 9);
  for (const LongTask& t : ts) {
    const int64_t at = std::llround(t.depth * static_cast<double>(t.question_offset));
    const auto from = [&](int64_t offset) {
      return solve_long_task(text(context(t).subspan(static_cast<size_t>(offset))) + question(t));
    };
    EXPECT_EQ(from(at), t.answer) << long_task_kind_name(t.kind) << " depth " << t.depth;
    EXPECT_NE(from(at + 3), t.answer) << long_task_kind_name(t.kind) << " depth " << t.depth;
  }
}

TEST(LongCtx, DepthsCoverZeroToOne) {
  for (int64_t length : {1024, 4096}) {
    const auto ts = tasks({length}, 30, 13);
    std::vector<int> bins(5, 0);
    double lo = 1, hi = 0;
    for (const LongTask& t : ts) {
      ASSERT_GE(t.depth, 0);
      ASSERT_LT(t.depth, 1);
      ++bins[static_cast<size_t>(t.depth * 5)];
      lo = std::min(lo, t.depth), hi = std::max(hi, t.depth);
    }
    // Depths are stratified per kind (10 strata each), so every fifth of [0, 1] gets 6 tasks,
    // give or take what the pieces' own lengths shift (4 to 8 over seeds 1-20).
    for (int b : bins) EXPECT_NEAR(b, 6, 2) << length;
    EXPECT_LT(lo, 0.1);
    // The needed pieces after the deepest one must fit behind it: at 1K they take up to 8% of
    // the context, so the deepest depth reached is 0.88-0.92 (seeds 1-20).
    EXPECT_GT(hi, 0.85);
  }
}

TEST(LongCtx, Lengths) {
  EXPECT_EQ(parse_context_length("512"), 512);
  EXPECT_EQ(parse_context_length("4K"), 4096);
  EXPECT_EQ(parse_context_length("16k"), 16384);
  EXPECT_EQ(parse_context_length("1M"), 1048576);
  EXPECT_EQ(parse_context_lengths("1K,4K,16K"), (std::vector<int64_t>{1024, 4096, 16384}));
  EXPECT_EQ(context_length_label(4096), "4K");
  EXPECT_EQ(context_length_label(1000), "1000");
  EXPECT_EQ(context_length_label(2 * 1048576), "2M");
  for (const char* bad : {"4Q", "", "K", "0", "-1", "4K,", "1.5K", "99999999", "1K,1024"}) {
    try {
      parse_context_lengths(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.context().field, "lengths") << bad;
    }
  }
}

TEST(LongCtx, RefusesTooLittleRoom) {
  const BaseDocuments small({documents().begin(), documents().begin() + 3});
  try {
    synthesize_long_tasks(small, ByteTokenizer(), std::vector<int64_t>{4096}, 3, 1);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.context().field, "base");
    EXPECT_NE(std::string(e.what()).find("too few for a task of 4K tokens"), std::string::npos)
        << e.what();
  }
  try {
    synthesize_long_tasks(base(), ByteTokenizer(), std::vector<int64_t>{400}, 3, 1);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.context().field, "lengths") << e.what();
  }
  EXPECT_EQ(parse_long_task_kind("aggregation"), LongTaskKind::kAggregation);
  EXPECT_THROW(parse_long_task_kind("sum"), Error);
}

}  // namespace
}  // namespace k3::data
