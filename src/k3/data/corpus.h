// The built-in corpus: English-like documents sampled from builtin_grammar(), written out by
// CorpusText. Document i is drawn from its own Philox stream keyed by (seed, i), so any document
// can be generated alone, in any order, on any thread, with the same result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "k3/data/corpus_text.h"
#include "k3/data/grammar.h"
#include "k3/data/tokenizer.h"

namespace k3::data {

class Corpus {
 public:
  explicit Corpus(uint64_t seed);

  uint64_t seed() const { return seed_; }
  const Grammar& grammar() const { return grammar_; }
  const CorpusText& text_form() const { return text_; }

  Derivation derivation(int64_t index) const;
  std::string document(int64_t index) const;
  // The derivation a document's text was written from; throws a k3::Error when the text is not
  // exactly what this corpus writes for some derivation.
  Derivation parse(std::string_view document) const;

  // Documents 0, 1, 2, ... separated by a blank line ("\n\n"), cut to exactly num_bytes.
  std::string text(int64_t num_bytes) const;
  // Documents 0, 1, 2, ... each encoded and followed by the tokenizer's eos_id(), cut to exactly
  // num_tokens. With the byte tokenizer this is the stream corpus_entropy() describes.
  std::vector<int32_t> tokens(int64_t num_tokens, const Tokenizer& tokenizer) const;

 private:
  uint64_t seed_;
  const Grammar& grammar_;
  CorpusText text_;
};

}  // namespace k3::data
