#include "k3/data/image_text.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "k3/base/error.h"
#include "k3/base/philox.h"

namespace k3::data {
namespace {

constexpr std::array<const char*, 3> kShapes = {"square", "circle", "cross"};
constexpr std::array<const char*, 5> kColours = {"red", "green", "blue", "yellow", "white"};
constexpr std::array<std::array<float, 3>, 5> kRgb = {
    {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0}, {1, 1, 1}}};
constexpr std::array<const char*, 4> kPlaces = {"top left", "top right", "bottom left",
                                                "bottom right"};
constexpr std::array<const char*, 3> kCounts = {"One shape.", "Two shapes.", "Three shapes."};

// Whether the point (u, v) of a quadrant, both in [0, 1], lies in the shape.
bool inside(int shape, float u, float v) {
  const float du = std::abs(u - 0.5f), dv = std::abs(v - 0.5f);
  switch (shape) {
    case 0:
      return du < 0.35f && dv < 0.35f;
    case 1:
      return du * du + dv * dv < 0.35f * 0.35f;
    default:
      return (du < 0.12f || dv < 0.12f) && du < 0.4f && dv < 0.4f;
  }
}

// Uniform integer in [0, n) from draw `k` of the sample's stream.
int draw(uint64_t seed, uint64_t stream, uint64_t k, int n) {
  return std::min(n - 1, static_cast<int>(philox_uniform(seed, stream, k) * static_cast<float>(n)));
}

}  // namespace

ImageTextSample image_text_sample(uint64_t seed, int64_t index, int64_t image_size) {
  K3_CHECK(image_size >= 2 && image_size % 2 == 0, "image-text corpus: images of ", image_size,
           " pixels a side; expected an even size of at least 2");
  const uint64_t stream = stream_of("image_text") + static_cast<uint64_t>(index);
  const int64_t S = image_size, q = S / 2;
  const int count = 1 + draw(seed, stream, 0, 3);
  // The quadrants in a random order; the first `count` hold a shape, listed in quadrant order.
  std::array<int, 4> places = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(places[i], places[draw(seed, stream, 1 + i, i + 1)]);
  // Sorted by insertion: std::sort's branch for 16 or more elements, inlined here, makes GCC 12
  // warn of a subscript past this 4-element array.
  for (int i = 1; i < count; ++i)
    for (int j = i; j > 0 && places[j - 1] > places[j]; --j) std::swap(places[j - 1], places[j]);
  ImageTextSample out{std::vector<float>(static_cast<size_t>(3 * S * S), 0.f), kCounts[count - 1]};
  for (int j = 0; j < count; ++j) {
    const int shape = draw(seed, stream, 10 + 2 * j, 3), colour = draw(seed, stream, 11 + 2 * j, 5);
    const int64_t y0 = places[j] / 2 * q, x0 = places[j] % 2 * q;
    for (int64_t y = 0; y < q; ++y)
      for (int64_t x = 0; x < q; ++x) {
        if (!inside(shape, (static_cast<float>(x) + 0.5f) / static_cast<float>(q),
                    (static_cast<float>(y) + 0.5f) / static_cast<float>(q)))
          continue;
        for (int c = 0; c < 3; ++c)
          out.pixels[static_cast<size_t>((c * S + y0 + y) * S + x0 + x)] = kRgb[colour][c];
      }
    out.caption += std::string(" A ") + kColours[colour] + " " + kShapes[shape] + " is at the " +
                   kPlaces[places[j]] + ".";
  }
  return out;
}

ImageTextRows image_text_rows(uint64_t seed, int64_t first_sample, int64_t rows, int64_t T,
                              const ImageTextFormat& f) {
  K3_CHECK(T > f.image_tokens, "image-text rows of ", T, " tokens cannot hold an image's ",
           f.image_tokens, " placeholders and a caption");
  ImageTextRows out{rows,
                    T,
                    std::vector<int32_t>(static_cast<size_t>(rows * T), f.pad),
                    std::vector<int32_t>(static_cast<size_t>(rows * T), f.ignore_index),
                    {}};
  const int64_t pixels = 3 * f.image_size * f.image_size;
  out.images.resize(static_cast<size_t>(rows * pixels));
  for (int64_t r = 0; r < rows; ++r) {
    const ImageTextSample s = image_text_sample(seed, first_sample + r, f.image_size);
    std::copy(s.pixels.begin(), s.pixels.end(), out.images.begin() + r * pixels);
    std::vector<int32_t> row(static_cast<size_t>(f.image_tokens), f.placeholder);
    for (unsigned char c : s.caption) row.push_back(c);
    row.push_back(f.eos);
    row.resize(std::min<size_t>(row.size(), static_cast<size_t>(T)));
    int32_t* tokens = out.tokens.data() + r * T;
    std::copy(row.begin(), row.end(), tokens);
    for (size_t i = 0; i + 1 < row.size(); ++i)
      if (row[i + 1] != f.placeholder) out.targets[static_cast<size_t>(r * T) + i] = row[i + 1];
  }
  return out;
}

}  // namespace k3::data
