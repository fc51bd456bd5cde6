// A BPE tokenizer directory, in the layout Kimi ships:
//   tiktoken.model         one token a line: the base64 of its bytes, a space, its rank (= id);
//                          ranks 0..N-1, each once, every single byte among the tokens.
//   tokenizer_config.json  "added_tokens_decoder": {"ID": {"content": "[BOS]", ...}, ...} the
//                          special tokens, ids from N on; "bos_token", "eos_token", "pad_token"
//                          name three of them (a string or {"content": ...}); "pat_str", when
//                          present, is the pre-tokenizer pattern (else Kimi's).
// Ids between N and the largest special id that the config leaves out are Kimi's reserved
// tokens, named <|reserved_token_ID|>.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::data {

struct BpeFiles {
  std::vector<std::string> tokens;    // by rank
  std::vector<std::string> specials;  // the content of special id tokens.size() + k
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string pattern;
};

inline constexpr const char* kRankFileName = "tiktoken.model";
inline constexpr const char* kTokenizerConfigName = "tokenizer_config.json";

// Throws a k3::Error naming the file, and the line, for anything malformed.
BpeFiles read_bpe_files(const std::string& dir);
// Creates DIR if needed and writes both files (each atomically).
void write_bpe_files(const std::string& dir, const BpeFiles& files);

// Standard base64 (RFC 4648, with padding). decode returns false on anything else.
std::string base64_encode(std::string_view bytes);
bool base64_decode(std::string_view text, std::string& bytes);

}  // namespace k3::data
