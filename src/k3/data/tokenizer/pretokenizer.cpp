#include "k3/data/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <utility>
#include <vector>

#include "k3/base/error.h"
#include "k3/data/tokenizer/utf8.h"

namespace k3::data {
namespace {

// Letters and marks but not Han, upper-case-like then lower-case-like (Kimi's two intersections).
#define K3_KIMI_UPPER R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])"
#define K3_KIMI_LOWER R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])"
#define K3_CONTRACTIONS R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"

constexpr std::string_view kKimiPcre2 =
    R"([\p{sc:Han}]+|)"
    R"([^\r\n\p{L}\p{N}]?)" K3_KIMI_UPPER "*" K3_KIMI_LOWER "+" K3_CONTRACTIONS
    "|"
    R"([^\r\n\p{L}\p{N}]?)" K3_KIMI_UPPER "+" K3_KIMI_LOWER "*" K3_CONTRACTIONS
    "|"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
#undef K3_KIMI_UPPER
#undef K3_KIMI_LOWER
#undef K3_CONTRACTIONS

constexpr std::string_view kKimiTiktoken =
    R"([\p{Han}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*)"
    R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+)"
    R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern as PCRE2 must read it to split as tiktoken's regex (Rust's) does, and for each of
// its bytes the offset in PATTERN it comes from (so that an error names the written offset).
// Rust's \s is Unicode White_Space, where PCRE2's \s under UCP also takes U+180E (MONGOLIAN
// VOWEL SEPARATOR, no longer White_Space since Unicode 6.3); Rust's \v is the vertical tab
// alone, PCRE2's every vertical space. Other escapes mean the same to both.
std::pair<std::string, std::vector<size_t>> as_pcre2(std::string_view pattern) {
  std::string out;
  std::vector<size_t> origin;
  auto emit = [&](std::string_view text, size_t from) {
    out += text;
    origin.insert(origin.end(), text.size(), from);
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      emit(pattern.substr(i, 1), i);
      continue;
    }
    const char escaped = pattern[i + 1];
    emit(escaped == 's'   ? R"(\p{White_Space})"
         : escaped == 'S' ? R"(\P{White_Space})"
         : escaped == 'v' ? R"(\x0B)"
                          : pattern.substr(i, 2),
         i);
    ++i;
  }
  origin.push_back(pattern.size());
  return {out, origin};
}

pcre2_code* as_code(void* code) { return static_cast<pcre2_code*>(code); }

struct MatchDataFree {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

std::string_view kimi_tiktoken_pattern() { return kKimiTiktoken; }
std::string_view kimi_pattern() { return kKimiPcre2; }

Pretokenizer::Pretokenizer(std::string pattern)
    : pattern_(pattern == kKimiTiktoken ? std::string(kKimiPcre2) : std::move(pattern)) {
  const ErrorContext ctx{"", "pat_str", -1};
  K3_CHECK_CTX(pattern_.find("&&[") == std::string::npos, ctx,
               "the pattern uses a class intersection (&&[...]), which PCRE2 does not have: "
               "write X minus Y as a negated class or a negative lookahead before X");
  const auto [compiled, origin] = as_pcre2(pattern_);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(detail::concat("the pattern does not compile at offset ", origin[offset], ": ",
                               reinterpret_cast<const char*>(message)),
                ctx);
  }
  uint32_t min_length = 0;
  pcre2_pattern_info(code, PCRE2_INFO_MINLENGTH, &min_length);
  if (min_length == 0) {
    pcre2_code_free(code);
    throw Error("the pattern can match empty text", ctx);
  }
  code_ = code;
  // Without JIT (an unsupported CPU) pcre2_match interprets the pattern: slower, same pieces.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(as_code(code_)); }

size_t Pretokenizer::split(std::string_view text, bool at_end,
                           std::vector<size_t>& piece_ends) const {
  std::unique_ptr<pcre2_match_data, MatchDataFree> match_data(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  K3_CHECK(match_data, "out of memory for PCRE2 match data");
  const size_t n = text.size();
  size_t p = 0;
  while (p < n) {
    const size_t run_end = utf8_valid_run_end(text, p);
    if (run_end == p) {  // an invalid byte, or a character the end of TEXT cuts off
      if (!at_end && utf8_char_at(text, p) == kUtf8Incomplete) return p;
      piece_ends.push_back(++p);
      continue;
    }
    // The run ends for good at an invalid byte; at the end of TEXT only when nothing follows.
    const bool closed = at_end || (run_end < n && utf8_char_at(text, run_end) == 0);
    p = split_run(text, p, run_end, closed, match_data.get(), piece_ends);
    if (p < run_end) return p;
  }
  return n;
}

size_t Pretokenizer::split_run(std::string_view text, size_t p, size_t end, bool closed,
                               void* match_data, std::vector<size_t>& piece_ends) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  // PARTIAL_HARD: a search that reads up to the end of the subject (a match that could go on, a
  // lookahead at the end, an alternative that failed only for want of text) reports a partial
  // match at once, so a complete match is one no later byte can change.
  const uint32_t options = PCRE2_NO_UTF_CHECK | (closed ? 0 : PCRE2_PARTIAL_HARD);
  const auto* base = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (p < end) {
    const int rc = pcre2_match(as_code(code_), base + p, end - p, 0, options, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // no piece starts before END
      if (!closed) return p;
      piece_ends.push_back(end);
      return end;
    }
    if (rc == PCRE2_ERROR_PARTIAL) {
      if (ov[0] > 0) piece_ends.push_back(p + ov[0]);  // unmatched text before it
      return p + ov[0];
    }
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(detail::concat("pre-tokenizer: matching ", end - p,
                                 " bytes failed: ", reinterpret_cast<const char*>(message)),
                  ErrorContext{"", "pat_str", -1});
    }
    K3_CHECK_CTX(ov[1] > ov[0], (ErrorContext{"", "pat_str", -1}),
                 "the pattern matched empty text");  // a piece must move the split on
    if (ov[0] > 0) piece_ends.push_back(p + ov[0]);
    piece_ends.push_back(p + ov[1]);
    p += ov[1];
  }
  return end;
}

std::vector<std::string_view> Pretokenizer::pieces(std::string_view text) const {
  std::vector<size_t> ends;
  split(text, true, ends);
  std::vector<std::string_view> out;
  out.reserve(ends.size());
  size_t begin = 0;
  for (size_t end : ends) {
    out.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

}  // namespace k3::data
