#include "k3/data/byte_tokenizer.h"

#include "k3/base/checksum.h"

namespace k3::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) {
      text.push_back(static_cast<char>(id));
    } else if (id == kBos) {
      text += "<|bos|>";
    } else if (id == kEos) {
      text += "<|eos|>";
    } else if (id == kPad) {
      text += "<|pad|>";
    } else {
      text += "<|" + std::to_string(id) + "|>";
    }
  }
  return text;
}

std::string ByteTokenizer::fingerprint() const {
  Sha256 hash;
  hash.update("k3lab byte tokenizer: 256 bytes, <|bos|>, <|eos|>, <|pad|>");
  return hash.hex_digest();
}

}  // namespace k3::data
