#include "k3/data/tokenizer/rank_table.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <functional>

namespace k3::data {

uint64_t hash_bytes(std::string_view bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
  }
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}

namespace {
std::atomic<uint64_t> next_serial{1};
constexpr size_t kMaxCached = 1 << 16;  // pieces; the cache is emptied when full
constexpr size_t kMaxCachedBytes = 64;  // longer pieces are rare: merged each time
}  // namespace

RankTable::RankTable(const std::vector<std::string>& tokens) : serial_(next_serial++) {
  offsets_.reserve(tokens.size() + 1);
  offsets_.push_back(0);
  for (const std::string& t : tokens) {
    bytes_ += t;
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  slots_.resize(std::bit_ceil(std::max<size_t>(16, 2 * tokens.size())));
  const size_t mask = slots_.size() - 1;
  for (int32_t r = 0; r < size(); ++r) {
    const uint64_t h = hash_bytes(token(r));
    size_t i = h & mask;
    while (slots_[i].rank >= 0) i = (i + 1) & mask;
    slots_[i] = Slot{static_cast<uint32_t>(h >> 32), r};
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_rank_[b] = find(std::string_view(&c, 1));
  }
}

int32_t RankTable::find(std::string_view bytes) const {
  const uint64_t h = hash_bytes(bytes);
  const auto tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.rank < 0) return -1;
    if (s.hash == tag) {
      const uint32_t begin = offsets_[s.rank];
      const uint32_t len = offsets_[s.rank + 1] - begin;
      if (len == bytes.size() && std::memcmp(bytes_.data() + begin, bytes.data(), len) == 0) {
        return s.rank;
      }
    }
  }
}

void RankTable::encode_piece(std::string_view piece, std::vector<int32_t>& ids, Scratch& s) const {
  const auto n = static_cast<uint32_t>(piece.size());
  if (n == 1) {
    ids.push_back(byte_rank_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (const int32_t whole = find(piece); whole >= 0) {  // most pieces of common text
    ids.push_back(whole);
    return;
  }
  if (s.owner != serial_) {
    s.cache.clear();
    s.cached_ids.clear();
    s.owner = serial_;
  }
  if (const auto it = s.cache.find(piece); it != s.cache.end()) {
    const auto [offset, count] = it->second;
    ids.insert(ids.end(), s.cached_ids.begin() + offset, s.cached_ids.begin() + offset + count);
    return;
  }
  if (!s.cache_merges || piece.size() > kMaxCachedBytes) {
    merge(piece, ids, s);
    return;
  }
  if (s.cache.size() == kMaxCached) {
    s.cache.clear();
    s.cached_ids.clear();
  }
  const size_t first = ids.size();
  merge(piece, ids, s);
  const auto offset = static_cast<uint32_t>(s.cached_ids.size());
  s.cached_ids.insert(s.cached_ids.end(), ids.begin() + first, ids.end());
  s.cache.emplace(piece, std::make_pair(offset, static_cast<uint32_t>(ids.size() - first)));
}

void RankTable::merge(std::string_view piece, std::vector<int32_t>& ids, Scratch& s) const {
  const auto n = static_cast<uint32_t>(piece.size());
  // Parts are byte ranges: the part starting at i ends at next[i]. A min-heap of
  // (rank << 32 | start) keeps the pairs; an entry whose rank no longer matches pair_rank[start]
  // is stale (the part was absorbed, or its right neighbour changed) and is skipped.
  s.next.resize(n);
  s.prev.resize(n);
  s.id.resize(n);
  s.pair_rank.resize(n);
  s.heap.clear();
  for (uint32_t i = 0; i < n; ++i) {
    s.next[i] = i + 1;
    s.prev[i] = i - 1;
    s.id[i] = byte_rank_[static_cast<unsigned char>(piece[i])];
  }
  auto rank_after = [&](uint32_t i) -> int32_t {  // of part i joined to the part after it
    const uint32_t j = s.next[i];
    return j < n ? find(piece.substr(i, s.next[j] - i)) : -1;
  };
  auto push = [&](uint32_t i) {
    s.pair_rank[i] = rank_after(i);
    if (s.pair_rank[i] >= 0) {
      s.heap.push_back(static_cast<uint64_t>(s.pair_rank[i]) << 32 | i);
      std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    }
  };
  for (uint32_t i = 0; i < n; ++i) push(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    const uint64_t top = s.heap.back();
    s.heap.pop_back();
    const auto rank = static_cast<int32_t>(top >> 32);
    const auto i = static_cast<uint32_t>(top);
    if (s.pair_rank[i] != rank) continue;
    const uint32_t j = s.next[i];
    s.next[i] = s.next[j];
    if (s.next[j] < n) s.prev[s.next[j]] = i;
    s.pair_rank[j] = -1;
    s.id[i] = rank;
    push(i);
    if (i > 0) push(s.prev[i]);
  }
  for (uint32_t i = 0; i < n; i = s.next[i]) ids.push_back(s.id[i]);
}

}  // namespace k3::data
