#include "k3/data/tokenizer/bpe_train.h"

#include <algorithm>
#include <queue>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/base/timer.h"
#include "k3/data/tokenizer/bpe_stream.h"
#include "k3/data/tokenizer/tokenizer_files.h"

namespace k3::data {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right);
}

struct Candidate {
  int64_t count;
  uint64_t pair;
  // The priority queue's top is the greatest: the highest count, then the lowest pair key (the
  // lower left rank, then the lower right rank).
  bool operator<(const Candidate& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

const std::vector<std::string> kTrainedSpecials = {"[BOS]", "[EOS]", "[PAD]"};

}  // namespace

void PieceCounts::add_text(std::string_view text) {
  const std::vector<std::string_view> pieces = pretokenizer_.pieces(text);
  for (std::string_view piece : pieces) ++counts_[std::string(piece)];
  pieces_ += static_cast<int64_t>(pieces.size());
  bytes_ += static_cast<int64_t>(text.size());
}

void PieceCounts::add_file(const std::string& path) {
  FileReader file(path);
  PieceStream stream(pretokenizer_);
  auto count = [&](std::string_view piece) {
    ++counts_[std::string(piece)];
    ++pieces_;
  };
  std::string chunk;
  constexpr uint64_t kChunk = 16 << 20;
  for (uint64_t offset = 0; offset < file.size(); offset += kChunk) {
    chunk.resize(std::min(kChunk, file.size() - offset));
    file.read(offset, chunk.data(), chunk.size());
    stream.feed(chunk, count);
  }
  stream.finish(count);
  bytes_ += static_cast<int64_t>(file.size());
}

LearnedTokens learn_bpe(const PieceCounts& counts, int32_t num_tokens, int64_t min_pair_count) {
  K3_CHECK(num_tokens >= 256, "learn_bpe: ", num_tokens, " tokens cannot hold the 256 bytes");
  LearnedTokens out;
  std::unordered_map<std::string, int32_t> token_ids;
  for (int b = 0; b < 256; ++b) {
    out.tokens.emplace_back(1, static_cast<char>(b));
    token_ids.emplace(out.tokens.back(), b);
  }
  // The distinct pieces as token sequences ("words"), how often each occurs, and for each pair
  // its count and the words it may occur in (a word listed twice, or no longer holding it, is
  // skipped when the pair is merged).
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> word_count;
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;
  for (const auto& [piece, count] : counts.counts()) {
    const auto w = static_cast<int32_t>(words.size());
    words.emplace_back(piece.begin(), piece.end());
    for (int32_t& s : words.back()) s = static_cast<unsigned char>(s);
    word_count.push_back(count);
    for (size_t i = 0; i + 1 < piece.size(); ++i) {
      const uint64_t p = pair_key(words[w][i], words[w][i + 1]);
      pair_count[p] += count;
      pair_words[p].push_back(w);
    }
  }
  std::priority_queue<Candidate> queue;
  for (const auto& [p, c] : pair_count) queue.push({c, p});

  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<int32_t> merged_word;
  while (static_cast<int32_t>(out.tokens.size()) < num_tokens) {
    // Entries whose count changed since they were queued are stale: the current count was
    // queued too.
    while (!queue.empty() && pair_count[queue.top().pair] != queue.top().count) queue.pop();
    if (queue.empty() || queue.top().count < min_pair_count) {
      out.stopped_early = true;
      break;
    }
    const uint64_t p = queue.top().pair;
    queue.pop();
    const auto left = static_cast<int32_t>(p >> 32), right = static_cast<int32_t>(p & 0xffffffff);
    std::string bytes = out.tokens[left] + out.tokens[right];
    auto [it, fresh] = token_ids.emplace(bytes, static_cast<int32_t>(out.tokens.size()));
    if (fresh) out.tokens.push_back(std::move(bytes));
    const int32_t id = it->second;
    ++out.merges;

    std::vector<int32_t> where = std::move(pair_words[p]);
    pair_words.erase(p);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    delta.clear();
    for (int32_t w : where) {
      std::vector<int32_t>& word = words[w];
      const int64_t c = word_count[w];
      merged_word.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged_word.push_back(id);
          ++i;
        } else {
          merged_word.push_back(word[i]);
        }
      }
      if (merged_word.size() == word.size()) continue;
      for (size_t i = 0; i + 1 < word.size(); ++i) delta[pair_key(word[i], word[i + 1])] -= c;
      for (size_t i = 0; i + 1 < merged_word.size(); ++i) {
        const uint64_t q = pair_key(merged_word[i], merged_word[i + 1]);
        delta[q] += c;
        if (merged_word[i] == id || merged_word[i + 1] == id) pair_words[q].push_back(w);
      }
      word.swap(merged_word);
    }
    for (const auto& [q, d] : delta) {
      if (d == 0) continue;
      const int64_t now = pair_count[q] += d;
      if (now > 0) queue.push({now, q});
    }
  }
  return out;
}

BpeTrainSummary train_bpe(const std::vector<std::string>& inputs, int32_t vocab_size,
                          const std::string& out_dir, const BpeTrainOptions& options) {
  const Timer timer;
  const auto num_specials = static_cast<int32_t>(kTrainedSpecials.size());
  K3_CHECK_CTX(vocab_size >= 256 + num_specials, (ErrorContext{"", "vocab-size", -1}), vocab_size,
               " is too small: the 256 bytes and ", num_specials, " special tokens need ",
               256 + num_specials);
  K3_CHECK_CTX(!inputs.empty(), (ErrorContext{"", "input", -1}), "no input files");
  K3_CHECK_CTX(options.min_pair_count >= 1, (ErrorContext{"", "min-pair-count", -1}),
               options.min_pair_count, " is below 1");
  const Pretokenizer pretokenizer(options.pattern);
  PieceCounts counts(pretokenizer);
  for (const std::string& path : inputs) counts.add_file(path);
  LearnedTokens learned = learn_bpe(counts, vocab_size - num_specials, options.min_pair_count);

  BpeFiles files;
  files.tokens = std::move(learned.tokens);
  files.specials = kTrainedSpecials;
  const auto base = static_cast<int32_t>(files.tokens.size());
  files.bos_id = base;
  files.eos_id = base + 1;
  files.pad_id = base + 2;
  files.pattern = pretokenizer.pattern();
  write_bpe_files(out_dir, files);

  BpeTrainSummary s;
  s.input_bytes = counts.bytes();
  s.pieces = counts.pieces();
  s.distinct_pieces = static_cast<int64_t>(counts.counts().size());
  s.merges = learned.merges;
  s.vocab_size = base + num_specials;
  s.stopped_early = learned.stopped_early;
  s.seconds = timer.seconds();
  return s;
}

}  // namespace k3::data
