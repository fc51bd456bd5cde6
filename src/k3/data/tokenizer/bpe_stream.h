// Encoding text that arrives in chunks of any size: the ids are exactly those of encoding the
// whole text at once. Pieces near the end of what has arrived stay pending while more bytes
// could change them (Pretokenizer::split without at_end).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "k3/data/tokenizer/bpe_tokenizer.h"

namespace k3::data {

// Pieces of a text fed in chunks, each passed on once no later byte can change it.
class PieceStream {
 public:
  explicit PieceStream(const Pretokenizer& pretokenizer) : pretokenizer_(pretokenizer) {}

  template <typename OnPiece>
  void feed(std::string_view bytes, OnPiece&& on_piece) {
    pending_.append(bytes);
    unsplit_ += bytes.size();
    // Split again once the new bytes are as many as those left pending before them: a long
    // pending piece (a run of spaces fed a byte at a time) is then re-read O(log) times, not
    // once per chunk.
    if (2 * unsplit_ >= pending_.size()) settle(false, on_piece);
  }

  template <typename OnPiece>
  void finish(OnPiece&& on_piece) {
    settle(true, on_piece);
  }

 private:
  template <typename OnPiece>
  void settle(bool at_end, OnPiece& on_piece) {
    ends_.clear();
    const size_t settled = pretokenizer_.split(pending_, at_end, ends_);
    const std::string_view text(pending_);
    size_t begin = 0;
    for (size_t end : ends_) {
      on_piece(text.substr(begin, end - begin));
      begin = end;
    }
    pending_.erase(0, settled);
    unsplit_ = 0;
  }

  const Pretokenizer& pretokenizer_;
  std::string pending_;  // bytes not yet passed on as pieces
  size_t unsplit_ = 0;   // of them, those fed since the last split
  std::vector<size_t> ends_;
};

// BpeTokenizer::encode over a text fed in chunks. The tokenizer must outlive it.
class BpeStreamEncoder {
 public:
  explicit BpeStreamEncoder(const BpeTokenizer& tokenizer)
      : tokenizer_(tokenizer), pieces_(tokenizer.pretokenizer()) {}

  // Appends the ids that BYTES settle.
  void feed(std::string_view bytes, std::vector<int32_t>& ids) {
    pieces_.feed(bytes, [&](std::string_view piece) {
      tokenizer_.ranks().encode_piece(piece, ids, scratch_);
    });
  }
  // Appends the ids of what is still pending; the text has ended.
  void finish(std::vector<int32_t>& ids) {
    pieces_.finish(
        [&](std::string_view piece) { tokenizer_.ranks().encode_piece(piece, ids, scratch_); });
  }

 private:
  const BpeTokenizer& tokenizer_;
  PieceStream pieces_;
  RankTable::Scratch scratch_;
};

}  // namespace k3::data
