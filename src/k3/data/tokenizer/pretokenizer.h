// The pre-tokenizer: splits text into the pieces that byte-pair merges stay within, by a regular
// expression (PCRE2 in UTF mode with Unicode properties, JIT compiled), as tiktoken does.
//
// Rules beyond tiktoken's, so that any bytes round-trip and a stream splits as the whole text:
// - Pieces are matched one after another, each search starting where the previous piece ended
//   and seeing no text before it (the pattern's lookbehinds see nothing).
// - Invalid UTF-8 (RFC 3629: overlong forms, surrogates, stray continuation bytes, a truncated
//   sequence) never reaches PCRE2: each invalid byte is a piece of its own, and the valid runs
//   around it are split as if each were a whole text.
// - Text the pattern does not match (tiktoken drops it) is a piece of its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace k3::data {

// Kimi's pre-tokenizer (tokenization_kimi.py, `pat_str`) as written for tiktoken, with the
// fancy-regex class intersection [X&&[^\p{Han}]].
std::string_view kimi_tiktoken_pattern();
// The same in PCRE2: X minus Han as one negated class of everything else ([^ other general
// categories, \p{sc:Han}]; the general categories partition the code points), and Han as the
// Script property, which is what \p{Han} means to tiktoken's regex (PCRE2's \p{Han} would also
// take script extensions such as the ideographic comma).
std::string_view kimi_pattern();

class Pretokenizer {
 public:
  // Compiles PATTERN; Kimi's tiktoken form is taken as kimi_pattern(). Throws a k3::Error (field
  // pat_str) when it does not compile, uses tiktoken's class intersection, or can match empty text.
  explicit Pretokenizer(std::string pattern);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Appends the end offset of each piece of TEXT, in order from offset 0, and returns where the
  // last appended piece ends. AT_END: TEXT is the whole text. Otherwise more bytes may follow,
  // and the split stops before the first piece they could change (a match that could go on or
  // whose lookahead reached the end, a character cut off by the end).
  size_t split(std::string_view text, bool at_end, std::vector<size_t>& piece_ends) const;

  std::vector<std::string_view> pieces(std::string_view text) const;  // of a whole text

 private:
  size_t split_run(std::string_view text, size_t begin, size_t end, bool closed, void* match_data,
                   std::vector<size_t>& piece_ends) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace k3::data
