// A read-only token stream made of pieces laid end to end: an in-memory vector of int32 ids, or
// the token arrays of memory-mapped shards (16- or 32-bit little-endian ids). Batches copy their
// windows out of it, so a stream of gigabytes is never copied whole.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace k3::data {

class TokenView {
 public:
  TokenView() = default;
  TokenView(std::span<const int32_t> tokens);  // NOLINT: a span is a one-piece view
  TokenView(const std::vector<int32_t>& tokens) : TokenView(std::span<const int32_t>(tokens)) {}

  // Appends SIZE ids of WIDTH bytes (2: uint16, 4: int32/uint32, little-endian) at DATA, which must
  // outlive the view.
  void append(const void* data, int64_t size, int width);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t operator[](int64_t i) const;
  // Tokens [start, start + count) into OUT; the range must lie within the stream.
  void copy(int64_t start, int64_t count, int32_t* out) const;
  std::vector<int32_t> to_vector() const;

 private:
  struct Piece {
    const void* data;
    int64_t begin;  // of the piece in the stream
    int64_t size;
    int width;
  };
  const Piece& piece_at(int64_t i) const;  // the piece holding token i

  std::vector<Piece> pieces_;
  int64_t size_ = 0;
};

}  // namespace k3::data
