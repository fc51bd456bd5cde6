// The built-in image-text corpus: captions that only the pixels tell (each named shape's colour
// fills its quadrant's centre, the unnamed quadrants are black, the count is right, and shapes
// tell apart at the pixels), samples that depend only on (seed, index), and rows laid out as the
// model reads them.
#include "k3/data/image_text.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace k3::data {
namespace {

constexpr int64_t kS = 16;

float pixel(const ImageTextSample& s, int c, int64_t y, int64_t x) {
  return s.pixels[static_cast<size_t>((c * kS + y) * kS + x)];
}

TEST(ImageText, CaptionsDescribeThePixels) {
  const std::map<std::string, std::array<float, 3>> rgb = {{"red", {1, 0, 0}},
                                                           {"green", {0, 1, 0}},
                                                           {"blue", {0, 0, 1}},
                                                           {"yellow", {1, 1, 0}},
                                                           {"white", {1, 1, 1}}};
  const std::map<std::string, int> places = {
      {"top left", 0}, {"top right", 1}, {"bottom left", 2}, {"bottom right", 3}};
  std::set<std::string> captions;
  std::map<std::string, std::set<std::vector<float>>> looks;  // shape → quadrant pixel patterns
  for (int64_t i = 0; i < 300; ++i) {
    const ImageTextSample s = image_text_sample(7, i, kS);
    captions.insert(s.caption);
    std::set<int> named;
    size_t at = 0;
    int shapes = 0;
    while ((at = s.caption.find(" A ", at)) != std::string::npos) {
      const size_t end = s.caption.find('.', at);
      const std::string phrase =
          s.caption.substr(at + 3, end - at - 3);  // "red circle is at the top left"
      const std::string colour = phrase.substr(0, phrase.find(' '));
      const std::string shape =
          phrase.substr(colour.size() + 1, phrase.find(" is") - colour.size() - 1);
      const int q = places.at(phrase.substr(phrase.find("the ") + 4));
      named.insert(q);
      ++shapes;
      const int64_t y0 = q / 2 * kS / 2, x0 = q % 2 * kS / 2;
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(pixel(s, c, y0 + kS / 4, x0 + kS / 4), rgb.at(colour)[c]) << s.caption;
      std::vector<float> mask;
      for (int64_t y = 0; y < kS / 2; ++y)
        for (int64_t x = 0; x < kS / 2; ++x)
          mask.push_back(pixel(s, 0, y0 + y, x0 + x) + pixel(s, 1, y0 + y, x0 + x) +
                             pixel(s, 2, y0 + y, x0 + x) >
                         0);
      looks[shape].insert(mask);
      at = end;
    }
    const char* counts[] = {"One shape.", "Two shapes.", "Three shapes."};
    ASSERT_GE(shapes, 1);
    ASSERT_LE(shapes, 3);
    EXPECT_TRUE(s.caption.starts_with(counts[shapes - 1])) << s.caption;
    EXPECT_EQ(named.size(), static_cast<size_t>(shapes))
        << "two shapes share a quadrant: " << s.caption;
    for (int q = 0; q < 4; ++q) {
      if (named.count(q)) continue;
      for (int c = 0; c < 3; ++c)
        for (int64_t y = 0; y < kS / 2; ++y)
          for (int64_t x = 0; x < kS / 2; ++x)
            ASSERT_EQ(pixel(s, c, q / 2 * kS / 2 + y, q % 2 * kS / 2 + x), 0.f) << s.caption;
    }
  }
  EXPECT_GT(captions.size(), 200u);  // varied
  // Each shape has one look, and the three differ.
  ASSERT_EQ(looks.size(), 3u);
  std::set<std::vector<float>> all;
  for (const auto& [shape, masks] : looks) {
    EXPECT_EQ(masks.size(), 1u) << shape;
    all.insert(*masks.begin());
  }
  EXPECT_EQ(all.size(), 3u);
}

TEST(ImageText, SamplesDependOnlyOnSeedAndIndex) {
  const ImageTextSample a = image_text_sample(3, 41, kS), b = image_text_sample(3, 41, kS);
  EXPECT_EQ(a.caption, b.caption);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_NE(image_text_sample(4, 41, kS).pixels, a.pixels);
  const ImageTextRows rows = image_text_rows(3, 40, 3, 64, {});
  EXPECT_EQ(
      std::vector<float>(rows.images.begin() + 3 * kS * kS, rows.images.begin() + 6 * kS * kS),
      a.pixels);
}

TEST(ImageText, RowsPlaceholdersCaptionEosPadding) {
  const ImageTextFormat f;
  const int64_t T = 160;  // the longest caption is about 125 bytes
  const ImageTextRows r = image_text_rows(5, 0, 4, T, f);
  for (int64_t row = 0; row < 4; ++row) {
    const std::string caption = image_text_sample(5, row, f.image_size).caption;
    const int32_t* t = r.tokens.data() + row * T;
    const int32_t* y = r.targets.data() + row * T;
    for (int64_t i = 0; i < f.image_tokens; ++i) EXPECT_EQ(t[i], f.placeholder);
    for (int64_t i = 0; i + 1 < f.image_tokens; ++i) EXPECT_EQ(y[i], f.ignore_index);
    const auto n = static_cast<int64_t>(caption.size());
    ASSERT_LT(f.image_tokens + n, T);
    // The last placeholder predicts the first caption byte; the caption then eos follow.
    EXPECT_EQ(y[f.image_tokens - 1], static_cast<unsigned char>(caption[0]));
    EXPECT_EQ(std::string(t + f.image_tokens, t + f.image_tokens + n), caption);
    EXPECT_EQ(t[f.image_tokens + n], f.eos);
    EXPECT_EQ(y[f.image_tokens + n - 1], f.eos);
    for (int64_t i = f.image_tokens + n; i < T; ++i) EXPECT_EQ(y[i], f.ignore_index);
    for (int64_t i = f.image_tokens + n + 1; i < T; ++i) EXPECT_EQ(t[i], f.pad);
  }
  // Cut at T: the first T tokens, still one image a row.
  const ImageTextRows cut = image_text_rows(5, 0, 1, 8, f);
  EXPECT_EQ(std::vector<int32_t>(cut.tokens.begin(), cut.tokens.end()),
            std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 8));
}

}  // namespace
}  // namespace k3::data
