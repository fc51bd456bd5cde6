// The built-in image-text corpus: procedurally drawn images whose captions can be told only by
// looking at them. Each image holds one to three shapes (square, circle, cross) in five colours,
// each in its own quadrant, on black; its caption counts them and names each one's colour, shape
// and place, in the plain sentences of the built-in text corpus ("Two shapes. A red circle is at
// the top left. A blue cross is at the bottom right."). Sample i is drawn from its own Philox
// stream keyed by (seed, i), so any sample can be made alone, in any order, with the same result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::data {

struct ImageTextSample {
  std::vector<float> pixels;  // [3, S, S], channels red, green, blue, in [0, 1]
  std::string caption;
};

// S = image_size, even (each quadrant S/2 pixels a side).
ImageTextSample image_text_sample(uint64_t seed, int64_t index, int64_t image_size);

// How rows of image-text samples are tokenized (byte tokens).
struct ImageTextFormat {
  int64_t image_size = 16;
  int64_t image_tokens = 4;  // placeholders an image fills
  int32_t placeholder = 259, eos = 257, pad = 258, ignore_index = -100;
};

// Rows of T tokens, one sample a row: the image's placeholders, its caption's bytes, eos, then
// padding (cut at T). Targets are the next tokens, except where the next token is a placeholder
// or padding (ignore_index): the first caption byte is predicted from the image alone.
struct ImageTextRows {
  int64_t rows = 0, T = 0;
  std::vector<int32_t> tokens, targets;  // [rows, T]
  std::vector<float> images;             // [rows, 3, S, S]
};
ImageTextRows image_text_rows(uint64_t seed, int64_t first_sample, int64_t rows, int64_t T,
                              const ImageTextFormat& format);

}  // namespace k3::data
