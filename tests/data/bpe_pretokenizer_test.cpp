// The pre-tokenizer: Kimi's pattern in PCRE2, invalid UTF-8, and refused patterns.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/data/tokenizer/pretokenizer.h"
#include "k3/data/tokenizer/utf8.h"

namespace k3::data {
namespace {

std::vector<std::string> pieces_of(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view piece : p.pieces(text)) out.emplace_back(piece);
  return out;
}

// Kimi's tiktoken pattern with each class intersection X&&[^\p{Han}] written literally as a
// lookahead before X: the reference the negated-class translation is checked against.
std::string lookahead_form() {
  std::string p(kimi_tiktoken_pattern());
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = p.find(from); at != std::string::npos; at = p.find(from, at + to.size())) {
      p.replace(at, from.size(), to);
    }
  };
  replace_all(R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]])",
              R"((?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]))");
  replace_all(R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]])",
              R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}]))");
  replace_all(R"([\p{Han}]+)", R"([\p{sc:Han}]+)");
  return p;
}

}  // namespace

TEST(Utf8, ClassifiesEachStart) {
  EXPECT_EQ(utf8_char_at("a", 0), 1);
  EXPECT_EQ(utf8_char_at("\xC3\xA9", 0), 2);          // é
  EXPECT_EQ(utf8_char_at("\xE4\xB8\xAD", 0), 3);      // 中
  EXPECT_EQ(utf8_char_at("\xF0\x9F\x91\x8D", 0), 4);  // 👍
  EXPECT_EQ(utf8_char_at("\xC0\xAF", 0), 0);          // overlong '/'
  EXPECT_EQ(utf8_char_at("\xE0\x80\xAF", 0), 0);      // overlong, 3 bytes
  EXPECT_EQ(utf8_char_at("\xED\xA0\x80", 0), 0);      // a surrogate
  EXPECT_EQ(utf8_char_at("\xF4\x90\x80\x80", 0), 0);  // above U+10FFFF
  EXPECT_EQ(utf8_char_at("\xF5\x80\x80\x80", 0), 0);
  EXPECT_EQ(utf8_char_at("\x80", 0), 0);                    // a stray continuation byte
  EXPECT_EQ(utf8_char_at("\xE4\xB8x", 0), 0);               // cut off by a non-continuation
  EXPECT_EQ(utf8_char_at("\xE4\xB8", 0), kUtf8Incomplete);  // cut off by the end
  EXPECT_EQ(utf8_char_at("\xF0\x9F", 0), kUtf8Incomplete);
  EXPECT_EQ(utf8_char_at("\xED\xA0", 0), 0);  // a surrogate's start is never valid
  EXPECT_EQ(utf8_valid_run_end("abcdefghij\xC3\xA9k\xFFxy", 0), 13u);
  EXPECT_EQ(utf8_valid_run_end("abcdefghij\xC3\xA9k\xFFxy", 14), 16u);
}

// Pieces worked out by hand from the pattern's alternatives (leftmost first), as tiktoken splits.
TEST(Pretokenizer, KimiPatternSplitsMixedText) {
  const Pretokenizer kimi{std::string(kimi_pattern())};
  EXPECT_EQ(pieces_of(kimi, "Hello世界! I'm 12345 NASA's中文、テスト\n\n  x"),
            (std::vector<std::string>{"Hello", "世界", "!", " I'm", " ", "123", "45", " NASA's",
                                      "中文", "、テスト", "\n\n", " ", " x"}));
  // Han runs split off Latin and kana on both sides; a Han character extension (々) stays Han;
  // combining marks stay with their letters; apostrophes end words only in the contractions.
  EXPECT_EQ(pieces_of(kimi, "abc中々def cafe\u0301 DON'T you'VE x'y"),
            (std::vector<std::string>{"abc", "中々", "def", " cafe\u0301", " DON'T", " you'VE",
                                      " x", "'y"}));
  // Punctuation runs take trailing newlines; a whitespace run before a word leaves the word its
  // last space; CRLF ends a line; a tab, like a space, starts the word after it.
  EXPECT_EQ(pieces_of(kimi, "end.\n\nNext   word\r\n\tTab"),
            (std::vector<std::string>{"end", ".\n\n", "Next", "  ", " word", "\r\n", "\tTab"}));
  // Kimi's pattern as tiktoken writes it compiles to the translation.
  EXPECT_EQ(Pretokenizer(std::string(kimi_tiktoken_pattern())).pattern(), kimi_pattern());
}

TEST(Pretokenizer, TranslationEqualsTheLookaheadForm) {
  const Pretokenizer kimi{std::string(kimi_pattern())};
  const Pretokenizer reference{lookahead_form()};
  // Upper, lower, title case, modifier letters, kana, hangul, Han (also a Han Lm and a Han
  // number), marks, digits of several scripts, punctuation (CJK too), spaces and newlines.
  const std::vector<std::string> alphabet = {
      "A",  "Z",  "a",  "z",      "É",      "é", "ǅ",  "ʰ",  "ー", "テ", "한",     "中",
      "文", "々", "〇", "\u0301", "\u0308", "1", "٣",  "五", "Ⅻ",  "'",  "s",      "t",
      "!",  ".",  "、", "。",     "«",      " ", "  ", "\n", "\r", "\t", "\u3000", "😀"};
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(pieces_of(kimi, text), pieces_of(reference, text)) << "text: " << text;
  }
}

// \s is Unicode White_Space, as tiktoken's regex reads it: U+180E (MONGOLIAN VOWEL SEPARATOR, a
// format character since Unicode 6.3) is punctuation-like to both patterns, so it starts a run of
// non-letters instead of ending a whitespace run. Pieces worked out from the alternatives.
TEST(Pretokenizer, WhitespaceIsUnicodeWhiteSpace) {
  const std::string cl100k =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
      R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
  for (const std::string& pattern : {cl100k, std::string(kimi_pattern())}) {
    const Pretokenizer p{pattern};
    EXPECT_EQ(pieces_of(p, "\u180e's"), (std::vector<std::string>{"\u180e'", "s"})) << pattern;
    EXPECT_EQ(pieces_of(p, "!\u180e"), (std::vector<std::string>{"!\u180e"})) << pattern;
    EXPECT_EQ(pieces_of(p, " \u180e1"), (std::vector<std::string>{" \u180e", "1"})) << pattern;
    // Every White_Space character is still whitespace: before a word, a run leaves it one.
    EXPECT_EQ(pieces_of(p, "\u2028\u3000\u00a0x"),
              (std::vector<std::string>{"\u2028\u3000", "\u00a0x"}))
        << pattern;
  }
  // \v is the vertical tab alone, as to tiktoken, not every vertical space.
  EXPECT_EQ(pieces_of(Pretokenizer(R"(\v+)"), "\v\v\n\v"),
            (std::vector<std::string>{"\v\v", "\n", "\v"}));
  // A compile error names the offset in the pattern as written.
  EXPECT_NE(testing::error_of([] { Pretokenizer p(R"(\s\s(ab)"); }).find("at offset 7"),
            std::string::npos);
}

TEST(Pretokenizer, InvalidUtf8BytesArePiecesOfTheirOwn) {
  const Pretokenizer kimi{std::string(kimi_pattern())};
  // The valid runs around an invalid byte are split as whole texts: "ab" ends at the byte.
  EXPECT_EQ(
      pieces_of(kimi,
                "ab\xFF"
                "cd \xC0\xAF"
                "x\xE4\xB8"),
      (std::vector<std::string>{"ab", "\xFF", "cd", " ", "\xC0", "\xAF", "x", "\xE4", "\xB8"}));
  // Without the end of the text, a cut-off character waits for the rest.
  std::vector<size_t> ends;
  EXPECT_EQ(kimi.split("ab \xE4\xB8", false, ends), 2u);
  EXPECT_EQ(ends, (std::vector<size_t>{2}));
}

TEST(Pretokenizer, LongRunsSplitWithoutExhaustingTheMatcher) {
  const Pretokenizer kimi{std::string(kimi_pattern())};
  const std::string letters(1 << 20, 'a');
  EXPECT_EQ(kimi.pieces(letters).size(), 1u);
  const std::string spaces = std::string(1 << 20, ' ') + "x";
  EXPECT_EQ(pieces_of(kimi, spaces),
            (std::vector<std::string>{std::string((1 << 20) - 1, ' '), " x"}));
  EXPECT_EQ(kimi.pieces(std::string(1 << 19, '\n') + std::string(1 << 19, ' ')).size(), 2u);
}

TEST(Pretokenizer, TextThePatternDoesNotMatchIsKept) {
  const Pretokenizer digits{R"(\d+)"};
  EXPECT_EQ(pieces_of(digits, "ab12cd3"), (std::vector<std::string>{"ab", "12", "cd", "3"}));
}

TEST(Pretokenizer, RefusesPatternsItCannotUse) {
  EXPECT_NE(testing::error_of([] {
              Pretokenizer p(R"([\p{L}&&[^\p{Han}]]+)");
            }).find("field pat_str: the pattern uses a class intersection"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { Pretokenizer p("(ab"); }).find("does not compile at offset 3"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { Pretokenizer p("a*"); }).find("can match empty text"),
            std::string::npos);
}

}  // namespace k3::data
