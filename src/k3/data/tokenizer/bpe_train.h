// Training a byte-level BPE vocabulary (docs/data.md, Training a tokenizer): pre-tokenize the
// inputs with the pattern the tokenizer will use, count the pieces, then repeatedly merge the
// most frequent adjacent pair of tokens within the pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "k3/data/tokenizer/pretokenizer.h"

namespace k3::data {

// How often each piece occurs in the texts added.
class PieceCounts {
 public:
  explicit PieceCounts(const Pretokenizer& pretokenizer) : pretokenizer_(pretokenizer) {}
  void add_text(std::string_view text);
  void add_file(const std::string& path);  // read in chunks: the file need not fit in memory

  const std::unordered_map<std::string, int64_t>& counts() const { return counts_; }
  int64_t pieces() const { return pieces_; }
  int64_t bytes() const { return bytes_; }

 private:
  const Pretokenizer& pretokenizer_;
  std::unordered_map<std::string, int64_t> counts_;
  int64_t pieces_ = 0, bytes_ = 0;
};

struct LearnedTokens {
  std::vector<std::string> tokens;  // by rank: the 256 bytes, then one per merge in order
  int64_t merges = 0;               // may exceed the tokens added: see learn_bpe
  bool stopped_early = false;       // no pair occurred MIN_PAIR_COUNT times before NUM_TOKENS
};

// Learns tokens until there are NUM_TOKENS (>= 256). Each step merges the pair with the highest
// count (occurrences weighted by the piece counts); among equal counts the pair whose left token
// has the lower rank, then whose right token has the lower rank. It stops early when the highest
// count is below MIN_PAIR_COUNT. A merge whose bytes are already a token (two different pairs can
// spell the same bytes) reuses that token and adds none.
LearnedTokens learn_bpe(const PieceCounts& counts, int32_t num_tokens, int64_t min_pair_count = 2);

struct BpeTrainSummary {
  int64_t input_bytes = 0, pieces = 0, distinct_pieces = 0, merges = 0;
  int32_t vocab_size = 0;  // written: base tokens and special tokens
  bool stopped_early = false;
  double seconds = 0;
};

struct BpeTrainOptions {
  std::string pattern = std::string(kimi_pattern());  // the pre-tokenizer, written as pat_str
  int64_t min_pair_count = 2;  // a pair occurring fewer times is not merged: training stops
};

// Trains on the files INPUTS and writes OUT_DIR/tiktoken.model and OUT_DIR/tokenizer_config.json
// (tokenizer_files.h) with VOCAB_SIZE ids in all: the base tokens, then [BOS], [EOS], [PAD]
// (the config's bos, eos and pad tokens). Fewer when it stops early.
BpeTrainSummary train_bpe(const std::vector<std::string>& inputs, int32_t vocab_size,
                          const std::string& out_dir, const BpeTrainOptions& options = {});

}  // namespace k3::data
