#include "k3/data/tokenizer/tokenizer_files.h"

#include <charconv>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/data/tokenizer/pretokenizer.h"

namespace k3::data {
namespace {

constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c) {
  const size_t at = kBase64.find(c);
  return at == std::string_view::npos ? -1 : static_cast<int>(at);
}

std::string json_path(const std::string& dir) { return dir + "/" + kTokenizerConfigName; }

std::vector<std::string> read_ranks(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<std::string> tokens;
  std::vector<int64_t> line_of_rank;
  std::unordered_map<std::string, int64_t> line_of_token;
  struct Entry {
    int64_t rank;
    std::string bytes;
  };
  std::vector<Entry> entries;
  int64_t line = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view row(text.data() + begin, end - begin);
    begin = end + 1;
    ++line;
    if (row.empty()) continue;  // as tiktoken's loader
    const ErrorContext ctx{path, "", -1};
    const size_t space = row.find(' ');
    K3_CHECK_CTX(space != std::string_view::npos && row.find(' ', space + 1) == std::string::npos,
                 ctx, "line ", line, ": expected '<base64 of the token> <rank>'");
    Entry e;
    K3_CHECK_CTX(base64_decode(row.substr(0, space), e.bytes), ctx, "line ", line,
                 ": invalid base64 '", row.substr(0, space), "'");
    K3_CHECK_CTX(!e.bytes.empty(), ctx, "line ", line, ": empty token");
    const std::string_view rank_text = row.substr(space + 1);
    const auto [ptr, ec] =
        std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), e.rank);
    K3_CHECK_CTX(ec == std::errc() && ptr == rank_text.data() + rank_text.size() && e.rank >= 0,
                 ctx, "line ", line, ": rank '", rank_text, "' is not a non-negative integer");
    const auto [at, fresh] = line_of_token.emplace(e.bytes, line);
    K3_CHECK_CTX(fresh, ctx, "line ", line, ": duplicate token (also on line ", at->second, ")");
    entries.push_back(std::move(e));
  }
  const auto n = static_cast<int64_t>(entries.size());
  tokens.resize(entries.size());
  line_of_rank.assign(entries.size(), 0);
  // Ranks are ids: dense, 0..N-1. With N entries each in range and none twice, none is missing.
  for (int64_t k = 0; k < n; ++k) {
    const int64_t rank = entries[k].rank;
    const int64_t entry_line = line_of_token.at(entries[k].bytes);
    const ErrorContext ctx{path, "", -1};
    K3_CHECK_CTX(rank < n, ctx, "line ", entry_line, ": rank ", rank, " is out of range: ", n,
                 " tokens must have the ranks 0..", n - 1);
    K3_CHECK_CTX(line_of_rank[rank] == 0, ctx, "line ", entry_line, ": duplicate rank ", rank,
                 " (also on line ", line_of_rank[rank], ")");
    line_of_rank[rank] = entry_line;
    tokens[rank] = std::move(entries[k].bytes);
  }
  for (int b = 0; b < 256; ++b) {
    K3_CHECK_CTX(line_of_token.count(std::string(1, static_cast<char>(b))),
                 (ErrorContext{path, "", -1}), "byte 0x", "0123456789abcdef"[b >> 4],
                 "0123456789abcdef"[b & 15], " is no token: every byte must have a rank");
  }
  return tokens;
}

// The 1-based line of byte OFFSET in TEXT.
int64_t line_at(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

// A special token named by KEY: "content" or {"content": "content", ...}.
int32_t named_special(const nlohmann::json& config, const char* key,
                      const std::map<std::string, int32_t>& ids, const std::string& path) {
  const ErrorContext ctx{path, key, -1};
  K3_CHECK_CTX(config.contains(key), ctx, "missing: name one of the added_tokens_decoder tokens");
  const nlohmann::json& v = config[key];
  const nlohmann::json& content = v.is_object() && v.contains("content") ? v["content"] : v;
  K3_CHECK_CTX(content.is_string(), ctx, "expected a token's content (a string), got ", v.dump());
  const auto it = ids.find(content.get<std::string>());
  K3_CHECK_CTX(it != ids.end(), ctx, "'", content.get<std::string>(),
               "' is not among the added_tokens_decoder tokens");
  return it->second;
}

void read_config(const std::string& dir, BpeFiles& files) {
  const std::string path = json_path(dir);
  const std::string text = read_file(path);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(detail::concat("line ", line_at(text, e.byte == 0 ? 0 : e.byte - 1),
                               ": invalid JSON: ", e.what()),
                ErrorContext{path, "", -1});
  }
  K3_CHECK_CTX(config.is_object(), (ErrorContext{path, "", -1}), "expected a JSON object");
  const ErrorContext ctx{path, "added_tokens_decoder", -1};
  K3_CHECK_CTX(
      config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object(), ctx,
      "missing or not an object: the special tokens by id");
  const auto base = static_cast<int64_t>(files.tokens.size());
  std::map<int64_t, std::string> by_id;
  std::map<std::string, int32_t> ids;
  for (const auto& [key, token] : config["added_tokens_decoder"].items()) {
    int64_t id = -1;
    const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    K3_CHECK_CTX(ec == std::errc() && ptr == key.data() + key.size(), ctx, "key '", key,
                 "' is not an id");
    K3_CHECK_CTX(id >= base && id < base + (1 << 20), ctx, "id ", id,
                 " is not a special id: ", "the ", base, " base tokens have the ids 0..", base - 1,
                 " and special ids follow them");
    K3_CHECK_CTX(token.is_object() && token.contains("content") && token["content"].is_string() &&
                     !token["content"].get<std::string>().empty(),
                 ctx, "id ", id, ": expected {\"content\": \"<non-empty text>\", ...}");
    const std::string content = token["content"].get<std::string>();
    const auto [at, fresh] = ids.emplace(content, static_cast<int32_t>(id));
    K3_CHECK_CTX(fresh, ctx, "'", content, "' is given to ids ", at->second, " and ", id);
    by_id[id] = content;
  }
  K3_CHECK_CTX(!by_id.empty(), ctx, "no special tokens");
  const int64_t last = by_id.rbegin()->first;
  for (int64_t id = base; id <= last; ++id) {
    const auto it = by_id.find(id);
    std::string content =
        it != by_id.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>";
    if (it == by_id.end()) {
      const auto [at, fresh] = ids.emplace(content, static_cast<int32_t>(id));
      K3_CHECK_CTX(fresh, ctx, "'", content, "' names id ", at->second, ", not the reserved id ",
                   id);
    }
    files.specials.push_back(std::move(content));
  }
  files.bos_id = named_special(config, "bos_token", ids, path);
  files.eos_id = named_special(config, "eos_token", ids, path);
  files.pad_id = named_special(config, "pad_token", ids, path);
  files.pattern = std::string(kimi_pattern());
  if (config.contains("pat_str")) {
    K3_CHECK_CTX(config["pat_str"].is_string(), (ErrorContext{path, "pat_str", -1}),
                 "expected the pre-tokenizer's regular expression (a string)");
    files.pattern = config["pat_str"].get<std::string>();
  }
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[v & 63] : '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& bytes) {
  bytes.clear();
  if (text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return false;  // "x=x=" style
    int v[4];
    for (int k = 0; k < 4 - pad; ++k) {
      v[k] = base64_value(text[i + k]);
      if (v[k] < 0) return false;
    }
    for (int k = 4 - pad; k < 4; ++k) v[k] = 0;
    const uint32_t word = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    bytes += static_cast<char>(word >> 16);
    if (pad < 2) bytes += static_cast<char>((word >> 8) & 255);
    if (pad < 1) bytes += static_cast<char>(word & 255);
  }
  return true;
}

BpeFiles read_bpe_files(const std::string& dir) {
  BpeFiles files;
  files.tokens = read_ranks(dir + "/" + kRankFileName);
  read_config(dir, files);
  return files;
}

void write_bpe_files(const std::string& dir, const BpeFiles& files) {
  std::filesystem::create_directories(dir);
  std::string ranks;
  for (size_t r = 0; r < files.tokens.size(); ++r) {
    ranks += base64_encode(files.tokens[r]) + " " + std::to_string(r) + "\n";
  }
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  const auto base = static_cast<int32_t>(files.tokens.size());
  for (size_t k = 0; k < files.specials.size(); ++k) {
    decoder[std::to_string(base + static_cast<int32_t>(k))] = {
        {"content", files.specials[k]}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
        {"single_word", false},         {"special", true}};
  }
  auto content = [&](int32_t id) { return files.specials.at(static_cast<size_t>(id - base)); };
  nlohmann::ordered_json config = {{"added_tokens_decoder", decoder},
                                   {"bos_token", content(files.bos_id)},
                                   {"eos_token", content(files.eos_id)},
                                   {"pad_token", content(files.pad_id)},
                                   {"pat_str", files.pattern}};
  write_file_atomic(dir + "/" + kRankFileName, ranks);
  write_file_atomic(json_path(dir), config.dump(2) + "\n");
}

}  // namespace k3::data
