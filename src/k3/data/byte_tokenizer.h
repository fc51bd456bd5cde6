// Byte-level tokenizer: ids 0..255 are the bytes of the text, then three special tokens.
#pragma once

#include "k3/data/tokenizer.h"

namespace k3::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;
  static constexpr int32_t kVocabSize = 259;

  std::string name() const override { return "byte"; }
  int32_t vocab_size() const override { return kVocabSize; }
  std::vector<int32_t> encode(std::string_view text) const override;
  // Specials are rendered as their names (<|bos|>, <|eos|>, <|pad|>) and ids outside the
  // vocabulary (a padded model head can sample them) as <|ID|>, so a decode never fails.
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
  int32_t pad_id() const override { return kPad; }
  std::string fingerprint() const override;  // of the name: the byte tokenizer has no files
};

}  // namespace k3::data
