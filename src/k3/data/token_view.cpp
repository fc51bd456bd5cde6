#include "k3/data/token_view.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "k3/base/error.h"

namespace k3::data {

// Shard ids are little-endian and are read in place.
static_assert(std::endian::native == std::endian::little);

TokenView::TokenView(std::span<const int32_t> tokens) {
  append(tokens.data(), static_cast<int64_t>(tokens.size()), 4);
}

void TokenView::append(const void* data, int64_t size, int width) {
  K3_CHECK(width == 2 || width == 4, "token width ", width, " (expected 2 or 4 bytes)");
  if (size == 0) return;
  pieces_.push_back({data, size_, size, width});
  size_ += size;
}

const TokenView::Piece& TokenView::piece_at(int64_t i) const {
  // The last piece that begins at or before i.
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), i,
                             [](int64_t at, const Piece& p) { return at < p.begin; });
  return *(it - 1);
}

int32_t TokenView::operator[](int64_t i) const {
  K3_CHECK(i >= 0 && i < size_, "token ", i, " outside a stream of ", size_);
  int32_t t;
  copy(i, 1, &t);
  return t;
}

void TokenView::copy(int64_t start, int64_t count, int32_t* out) const {
  K3_CHECK(start >= 0 && count >= 0 && start + count <= size_, "tokens ", start, "..",
           start + count, " outside a stream of ", size_);
  while (count > 0) {
    const Piece& p = piece_at(start);
    const int64_t at = start - p.begin, n = std::min(count, p.size - at);
    if (p.width == 4) {
      std::memcpy(out, static_cast<const int32_t*>(p.data) + at, static_cast<size_t>(n) * 4);
    } else {
      const uint16_t* in = static_cast<const uint16_t*>(p.data) + at;
      for (int64_t k = 0; k < n; ++k) out[k] = in[k];
    }
    out += n;
    start += n;
    count -= n;
  }
}

std::vector<int32_t> TokenView::to_vector() const {
  std::vector<int32_t> out(static_cast<size_t>(size_));
  copy(0, size_, out.data());
  return out;
}

}  // namespace k3::data
