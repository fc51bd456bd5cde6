// The base vocabulary of a byte-level BPE tokenizer: each token's bytes, its rank being its id,
// and tiktoken's byte-pair merge that turns a piece of text into ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace k3::data {

// A fast 64-bit hash of short byte strings (8 bytes a step, then a final mix).
uint64_t hash_bytes(std::string_view bytes);

class RankTable {
 public:
  // TOKENS[r] is the token of rank r: distinct, non-empty, and every single byte among them
  // (the file loader checks this and says where it fails; here it is a precondition).
  explicit RankTable(const std::vector<std::string>& tokens);

  int32_t size() const { return static_cast<int32_t>(offsets_.size()) - 1; }
  std::string_view token(int32_t rank) const {
    return std::string_view(bytes_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }
  int32_t find(std::string_view bytes) const;  // its rank, -1 when it is no token
  int32_t byte_rank(unsigned char b) const { return byte_rank_[b]; }

  // Working memory of encode_piece, reused from piece to piece, and the ids of the pieces it
  // merged lately (text repeats its words): one per thread or stream, never shared.
  struct Scratch {
    std::vector<uint32_t> next, prev;
    std::vector<int32_t> id, pair_rank;
    std::vector<uint64_t> heap;
    bool cache_merges = true;  // false: merge every piece afresh (to measure what the cache buys)
    uint64_t owner = 0;        // the serial of the table the cache is of
    struct Hash {
      using is_transparent = void;
      size_t operator()(std::string_view s) const { return hash_bytes(s); }
    };
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> cache;
    std::vector<int32_t> cached_ids;  // cache values are (offset, count) into this
  };
  // Appends the ids of PIECE: starting from its bytes, merge the adjacent pair of parts whose
  // concatenation has the lowest rank (the leftmost among equals) until no pair is a token.
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids, Scratch& scratch) const;

 private:
  struct Slot {
    uint32_t hash = 0;  // the low half of the key's hash
    int32_t rank = -1;  // -1: empty
  };
  void merge(std::string_view piece, std::vector<int32_t>& ids, Scratch& scratch) const;

  uint64_t serial_;                // distinct for every table made in this process
  std::string bytes_;              // the tokens one after another
  std::vector<uint32_t> offsets_;  // token r is bytes_[offsets_[r], offsets_[r + 1])
  std::vector<Slot> slots_;        // open addressing, a power of two, at most half full
  int32_t byte_rank_[256];
};

}  // namespace k3::data
