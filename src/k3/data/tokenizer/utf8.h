// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), the
// definition PCRE2 checks in UTF mode.
#pragma once

#include <cstddef>
#include <string_view>

namespace k3::data {

// What starts at TEXT[i]: a whole valid character (its length, 1..4), an invalid byte (0), or
// the start of a valid character cut off by the end of TEXT (kUtf8Incomplete).
inline constexpr int kUtf8Incomplete = -1;
int utf8_char_at(std::string_view text, size_t i);

// The end of the run of whole valid characters starting at I (I itself when none).
size_t utf8_valid_run_end(std::string_view text, size_t i);

}  // namespace k3::data
