// How the corpus writes a derivation's terminals as text, and reads text back into terminals.
//
// Words are separated by one space; punctuation sticks to the word before it; the paragraph break
// "\n" replaces the space before the next word; the first word of a document, of a paragraph and
// after . ! ? is capitalized. Reading inverts this exactly (capitalization is unambiguous because
// no two words capitalize alike), so text -> terminals -> derivation is a function.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "k3/data/grammar.h"

namespace k3::data {

class CorpusText {
 public:
  // Throws a k3::Error naming the terminal when a grammar's terminals cannot be written this way:
  // each must be a word of ASCII letters, one of , . ; : ! ? or "\n"; documents must start with a
  // word and every "\n" must be followed by a word.
  explicit CorpusText(const Grammar& grammar);

  void render(std::span<const int> terminals, std::string& out) const;  // appends
  std::string render(std::span<const int> terminals) const;
  // Throws a k3::Error giving the byte offset of the first unknown word or character.
  std::vector<int> read(std::string_view text) const;

  // Byte lengths are additive: a document's text has (sum of charged_bytes of its terminals) - 1
  // bytes. A word is charged its length plus the space before it (the first word has none), "\n"
  // is charged nothing (it takes the place of that space) and punctuation its one byte.
  int charged_bytes(int terminal) const { return charged_bytes_[terminal]; }

 private:
  bool starts_sentence(int previous_terminal) const;

  const Grammar& grammar_;
  std::vector<std::string> capitalized_;  // per terminal; "" for non-words
  std::vector<char> is_word_;
  std::vector<char> ends_sentence_;  // . ! ? and "\n": the next word is capitalized
  std::vector<int> charged_bytes_;
  std::unordered_map<std::string, int> capitalized_ids_;
};

}  // namespace k3::data
