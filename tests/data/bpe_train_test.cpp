// Training: the merge table of a tiny input worked out by hand, the stop at the vocabulary size or
// when no pair occurs twice, and the written directory loading back.
#include "k3/data/tokenizer/bpe_train.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/data/tokenizer/bpe_tokenizer.h"

namespace k3::data {

// Pieces "aaabdaaabac" and " aaabdaaabac", once each (pair counts below are over both).
//  1. aa (8)                                   -> 256 "aa":    [aa a b d aa a b a c]
//  2. aa+a (4) ties a+b (4): lower left rank a -> 257 "ab":    [aa ab d aa ab a c]
//  3. aa+ab (4)                                -> 258 "aaab":  [aaab d aaab a c]
//  4. count 2 for aaab+d, d+aaab, aaab+a, a+c: lowest left rank a (97) -> 259 "ac"
//  5. aaab+d, d+aaab (2): d (100) before aaab (258) -> 260 "daaab": [aaab daaab ac]
//  6. aaab+daaab, daaab+ac (2): 258 before 260 -> 261 "aaabdaaab": [aaabdaaab ac]
//  7. aaabdaaab+ac (2) -> 262 "aaabdaaabac"; then " "+262 occurs once: stop early.
TEST(TrainBpe, LearnsTheHandCheckedMergeTable) {
  const testing::TempDir dir("bpe_train");
  const std::string input = dir.file("input.txt", "aaabdaaabac aaabdaaabac");
  const BpeTrainSummary s = train_bpe({input}, 300, dir.path() + "/tok");
  EXPECT_TRUE(s.stopped_early);
  EXPECT_EQ(s.merges, 7);
  EXPECT_EQ(s.vocab_size, 263 + 3);
  EXPECT_EQ(s.pieces, 2);
  EXPECT_EQ(s.distinct_pieces, 2);
  const BpeFiles files = read_bpe_files(dir.path() + "/tok");
  ASSERT_EQ(files.tokens.size(), 263u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(files.tokens[b], std::string(1, static_cast<char>(b)));
  EXPECT_EQ(
      std::vector<std::string>(files.tokens.begin() + 256, files.tokens.end()),
      (std::vector<std::string>{"aa", "ab", "aaab", "ac", "daaab", "aaabdaaab", "aaabdaaabac"}));
  EXPECT_EQ(files.specials, (std::vector<std::string>{"[BOS]", "[EOS]", "[PAD]"}));
  EXPECT_EQ(files.bos_id, 263);
  EXPECT_EQ(files.eos_id, 264);
  EXPECT_EQ(files.pad_id, 265);
  EXPECT_EQ(files.pattern, kimi_pattern());
  const BpeTokenizer tok(dir.path() + "/tok");
  EXPECT_EQ(tok.encode("aaabdaaabac aaab"), (std::vector<int32_t>{262, ' ', 258}));
}

TEST(TrainBpe, StopsAtTheVocabularySize) {
  const testing::TempDir dir("bpe_train_stop");
  const std::string input = dir.file("input.txt", "aaabdaaabac aaabdaaabac");
  const BpeTrainSummary s = train_bpe({input}, 259 + 3, dir.path() + "/tok");
  EXPECT_FALSE(s.stopped_early);
  EXPECT_EQ(s.vocab_size, 262);
  const BpeFiles files = read_bpe_files(dir.path() + "/tok");
  EXPECT_EQ(std::vector<std::string>(files.tokens.begin() + 256, files.tokens.end()),
            (std::vector<std::string>{"aa", "ab", "aaab"}));
  // The least pair count: at 5, only aa (8) is merged; at 1, " " + 262 (once) is merged too.
  BpeTrainOptions options;
  options.min_pair_count = 5;
  EXPECT_EQ(train_bpe({input}, 300, dir.path() + "/min5", options).merges, 1);
  options.min_pair_count = 1;
  EXPECT_EQ(train_bpe({input}, 300, dir.path() + "/min1", options).merges, 8);
  EXPECT_EQ(read_bpe_files(dir.path() + "/min1").tokens.back(), " aaabdaaabac");
  EXPECT_NE(testing::error_of([&] {
              train_bpe({input}, 258, dir.path() + "/small");
            }).find("field vocab-size: 258 is too small"),
            std::string::npos);
}

// Piece counts are the same whether a file is read in chunks or as one text.
TEST(TrainBpe, CountsAFileAsTheWholeText) {
  const testing::TempDir dir("bpe_counts");
  std::string text;
  for (int k = 0; k < 3000; ++k) text += "Line " + std::to_string(k) + ":  some words,\n\n";
  const std::string path = dir.file("text.txt", text);
  const Pretokenizer pre{std::string(kimi_pattern())};
  PieceCounts from_file(pre), from_text(pre);
  from_file.add_file(path);
  from_text.add_text(text);
  EXPECT_EQ(from_file.counts(), from_text.counts());
  EXPECT_EQ(from_file.pieces(), from_text.pieces());
  EXPECT_EQ(from_file.bytes(), static_cast<int64_t>(text.size()));
}

}  // namespace k3::data
