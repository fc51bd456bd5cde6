#include "k3/data/shards/shard_format.h"

#include <cstring>

#include "k3/base/error.h"

namespace k3::data::shards {

namespace {

constexpr size_t kVersionAt = 8, kWidthAt = 12, kTokensAt = 16, kDocumentsAt = 24,
                 kFingerprintAt = 32;
constexpr uint64_t kImplausible = uint64_t{1} << 56;

template <typename T>
void put(std::string& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof(T));  // the host is little-endian (token_view.cpp)
}

template <typename T>
T get(std::string_view in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

bool is_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

uint64_t ShardHeader::index_offset() const {
  return (kShardHeaderBytes + tokens * token_bytes + 7) / 8 * 8;
}

uint64_t ShardHeader::file_size() const { return index_offset() + documents * 8; }

uint32_t token_bytes_for(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

std::string encode_shard_header(const ShardHeader& h) {
  K3_CHECK(h.tokenizer_fingerprint.size() == kFingerprintChars, "a tokenizer fingerprint of ",
           kFingerprintChars, " hex digits, got '", h.tokenizer_fingerprint, "'");
  std::string out(kShardHeaderBytes, '\0');
  std::memcpy(out.data(), kShardMagic, sizeof kShardMagic);
  put<uint32_t>(out, kVersionAt, kShardVersion);
  put<uint32_t>(out, kWidthAt, h.token_bytes);
  put<uint64_t>(out, kTokensAt, h.tokens);
  put<uint64_t>(out, kDocumentsAt, h.documents);
  std::memcpy(out.data() + kFingerprintAt, h.tokenizer_fingerprint.data(), kFingerprintChars);
  return out;
}

ShardHeader decode_shard_header(std::string_view bytes, uint64_t file_size,
                                const std::string& file) {
  const ErrorContext ctx{file, "", -1};
  K3_CHECK_CTX(file_size >= kShardHeaderBytes && bytes.size() >= kShardHeaderBytes, ctx,
               "truncated at byte ", file_size, ": a token shard has a header of ",
               kShardHeaderBytes, " bytes");
  K3_CHECK_CTX(std::memcmp(bytes.data(), kShardMagic, sizeof kShardMagic) == 0, ctx,
               "not a token shard: no magic \"K3SHARD\" at byte 0");
  const uint32_t version = get<uint32_t>(bytes, kVersionAt);
  K3_CHECK_CTX(version == kShardVersion, ctx, "shard format version ", version, " at byte ",
               kVersionAt, ", expected ", kShardVersion);
  ShardHeader h;
  h.token_bytes = get<uint32_t>(bytes, kWidthAt);
  K3_CHECK_CTX(h.token_bytes == 2 || h.token_bytes == 4, ctx, "token width ", h.token_bytes,
               " at byte ", kWidthAt, ", expected 2 or 4");
  h.tokens = get<uint64_t>(bytes, kTokensAt);
  h.documents = get<uint64_t>(bytes, kDocumentsAt);
  h.tokenizer_fingerprint = std::string(bytes.substr(kFingerprintAt, kFingerprintChars));
  K3_CHECK_CTX(is_hex(h.tokenizer_fingerprint), ctx, "no tokenizer fingerprint at byte ",
               kFingerprintAt, " (expected ", kFingerprintChars, " lowercase hex digits)");
  // Counts no file could hold, checked before they are multiplied.
  K3_CHECK_CTX(h.tokens < kImplausible && h.documents <= h.tokens, ctx,
               "implausible counts: ", h.tokens, " tokens (byte ", kTokensAt, ") and ", h.documents,
               " documents (byte ", kDocumentsAt, ")");
  K3_CHECK_CTX(file_size >= h.file_size(), ctx, "truncated at byte ", file_size, ": ", h.tokens,
               " tokens and ", h.documents, " documents end at byte ", h.file_size());
  K3_CHECK_CTX(file_size == h.file_size(), ctx, "unexpected bytes from byte ", h.file_size(),
               " to ", file_size, " after the document index");
  return h;
}

}  // namespace k3::data::shards
