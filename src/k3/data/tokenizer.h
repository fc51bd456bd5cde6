// The tokenizer interface the data pipeline and the trainer are written against.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace k3::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::string name() const = 0;
  // Ids are in [0, vocab_size()). A model's embedding table may be larger (padded), never smaller.
  virtual int32_t vocab_size() const = 0;

  // Text never produces special ids: a literal "<|eos|>" in the text is encoded as its bytes.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;  // ends every document in a token stream
  virtual int32_t pad_id() const = 0;

  // Identifies what the ids mean (hex SHA-256 of the vocabulary, special tokens and pre-tokenizer):
  // token shards carry it, and a run refuses shards made by another tokenizer.
  virtual std::string fingerprint() const = 0;
};

// A tokenizer by name: "byte", or a BPE tokenizer directory (tiktoken.model and
// tokenizer_config.json, tokenizer/bpe_tokenizer.h). Throws a k3::Error (field "tokenizer") for
// anything else, and one naming the file for a malformed directory.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace k3::data
