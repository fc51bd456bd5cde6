#include "k3/train/eval/longctx_eval.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/corpus.h"
#include "k3/model/config.h"

namespace k3::train {
namespace {

std::vector<data::LongTask> small_tasks(int64_t per_length) {
  data::ByteTokenizer tok;
  data::Corpus corpus(2);
  std::vector<std::vector<int32_t>> docs;
  for (int64_t i = 0; i < 100; ++i) docs.push_back(tok.encode(corpus.document(i)));
  return data::synthesize_long_tasks(data::BaseDocuments(docs), tok,
                                     std::vector<int64_t>{768, 1024}, per_length, 4);
}

std::span<const int32_t> answer_tokens(const data::LongTask& t) {
  return std::span(t.tokens).subspan(static_cast<size_t>(t.answer_offset),
                                     static_cast<size_t>(t.answer_length));
}

TEST(LongCtxEval, ScoresTheWholeAnswerSpan) {
  for (const data::LongTask& t : small_tasks(3)) {
    std::vector<int32_t> predicted(answer_tokens(t).begin(), answer_tokens(t).end());
    EXPECT_TRUE(predicts_answer(t, predicted));
    for (size_t j : {size_t{0}, predicted.size() - 1}) {  // first and last token count alike
      std::vector<int32_t> wrong = predicted;
      wrong[j] = wrong[j] == 'x' ? 'y' : 'x';
      EXPECT_FALSE(predicts_answer(t, wrong));
    }
    EXPECT_FALSE(predicts_answer(t, std::span(predicted).first(predicted.size() - 1)));
  }
}

// Tokens are counted right position by position; a short prediction counts only what it has.
TEST(LongCtxEval, CountsAnswerTokensRightOneByOne) {
  for (const data::LongTask& t : small_tasks(2)) {
    std::vector<int32_t> predicted(answer_tokens(t).begin(), answer_tokens(t).end());
    const auto n = static_cast<int64_t>(predicted.size());
    EXPECT_EQ(answer_tokens_right(t, predicted), n);
    predicted[0] = predicted[0] == 'x' ? 'y' : 'x';
    predicted[static_cast<size_t>(n - 1)] =
        predicted[static_cast<size_t>(n - 1)] == 'x' ? 'y' : 'x';
    EXPECT_EQ(answer_tokens_right(t, predicted), n - 2);
    EXPECT_EQ(answer_tokens_right(t, std::span(predicted).first(1)), 0);
  }
}

TEST(LongCtxEval, TokenTableByLengthAndKind) {
  using K = data::LongTaskKind;
  const std::vector<LongTaskOutcome> outcomes = {{1024, 0.1, false, K::kMultiKey, 3, 4},
                                                 {1024, 0.5, true, K::kAggregation, 2, 2},
                                                 {4096, 0.3, false, K::kVariableTracking, 0, 5},
                                                 {4096, 0.7, false, K::kMultiKey, 1, 4}};
  const std::string table = token_accuracy_table(outcomes);
  const std::vector<std::string> want = {
      "multi_key",   "variable_tracking", "aggregation",
      "75.0% (3/4)", "100.0% (2/2)",      "83.3% (5/6)",  // 1K: multi_key, aggregation, all
      "0.0% (0/5)",  "25.0% (1/4)",       "11.1% (1/9)",  // 4K
      "50.0% (4/8)", "40.0% (6/15)"};                     // all: multi_key, all
  for (const std::string& w : want)
    EXPECT_NE(table.find(w), std::string::npos) << w << "\n" << table;
}

// The greedy tokens from the decode path are the argmax of the full forward's logits at the
// positions before each answer token.
TEST(LongCtxEval, GreedyAnswerMatchesTheFullForward) {
  auto s = open_session(
      RunConfig{}, model::load_model_config(testing::source_dir() + "/configs/dense-tiny.json"));
  s->model->initialize(3);
  const data::LongTask t = small_tasks(1)[0];
  const int64_t T = t.answer_offset + t.answer_length - 1, V = s->model->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(T * V));
  s->model->forward_logits(s->arena, t.tokens.data(), 1, T, logits.data());
  std::vector<int32_t> expected;
  for (int64_t p = t.answer_offset - 1; p < T; ++p) {
    const float* row = logits.data() + p * V;
    expected.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
  }
  EXPECT_EQ(greedy_answer_tokens(*s, t), expected);
}

TEST(LongCtxEval, DepthBinsAreHalfOpen) {
  // Bin b of 5 holds depths in [b/5, (b+1)/5); a depth of 1 goes to the last bin.
  const std::vector<LongTaskOutcome> outcomes = {
      {1024, 0.0, true},   {1024, 0.19, false}, {1024, 0.2, true},  {1024, 0.39, true},
      {1024, 0.61, false}, {1024, 0.99, true},  {1024, 1.0, false}, {4096, 0.5, true}};
  const AccuracyGrid g = accuracy_grid(outcomes, 5);
  EXPECT_EQ(g.tasks[0], (std::vector<int64_t>{2, 2, 0, 1, 2}));
  EXPECT_EQ(g.correct[0], (std::vector<int64_t>{1, 2, 0, 0, 1}));
  EXPECT_EQ(g.tasks[1], (std::vector<int64_t>{0, 0, 1, 0, 0}));
  EXPECT_TRUE(std::isnan(g.accuracy(0, 2)));
}

TEST(LongCtxEval, GridTableAndHeatmap) {
  // Planted outcomes: at 768 tokens every task right, at 1K only those deeper than 0.5.
  std::vector<LongTaskOutcome> outcomes;
  for (const data::LongTask& t : small_tasks(10))
    outcomes.push_back({t.length(), t.depth, t.length() == 768 || t.depth >= 0.5});
  const AccuracyGrid g = accuracy_grid(outcomes, 5);
  ASSERT_EQ(g.lengths, (std::vector<int64_t>{768, 1024}));
  int64_t total = 0;
  for (int b = 0; b < 5; ++b) {
    total += g.tasks[0][static_cast<size_t>(b)] + g.tasks[1][static_cast<size_t>(b)];
    if (g.tasks[0][static_cast<size_t>(b)] > 0) {
      EXPECT_EQ(g.accuracy(0, b), 1.0);
    }
  }
  EXPECT_EQ(total, 20);
  EXPECT_EQ(g.accuracy(1, 0), 0.0);
  EXPECT_EQ(g.accuracy(1, 4), 1.0);
  EXPECT_EQ(g.bin_label(1), "0.2-0.4");

  const std::string table = accuracy_table(g);
  EXPECT_NE(table.find("depth 0.8-1"), std::string::npos) << table;
  EXPECT_NE(table.find("10/10  100%"), std::string::npos) << table;  // 768, all bins
  EXPECT_EQ(table.substr(table.rfind('\n', table.size() - 2) + 1, 3), "all") << table;

  const Heatmap h = accuracy_heatmap(g, "t");
  EXPECT_EQ(h.row_labels, (std::vector<std::string>{"768", "1K"}));
  EXPECT_EQ(h.values[1][0], 0);
  EXPECT_EQ(h.values[0][2], 100);
  EXPECT_TRUE(h.cell_numbers);
}

}  // namespace
}  // namespace k3::train
