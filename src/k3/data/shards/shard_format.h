// The token shard file, byte by byte (all integers little-endian):
//
//   0     8 bytes   magic "K3SHARD\0"
//   8     u32       format version (kShardVersion)
//   12    u32       bytes per token id: 2 (uint16) or 4 (uint32)
//   16    u64       token count N
//   24    u64       document count D
//   32    64 bytes  the tokenizer's fingerprint (lowercase hex SHA-256, Tokenizer::fingerprint)
//   96    zeros up to kShardHeaderBytes (4096), so the ids begin on a page
//   4096  N token ids; every document's ids are followed by the tokenizer's eos id
//   then  zeros up to a multiple of 8
//   then  D u64: the end of each document (one past its eos) counted in tokens from the first
//         id, strictly increasing, the last one N
//
// and nothing after. A shard holds whole documents.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace k3::data::shards {

inline constexpr char kShardMagic[8] = {'K', '3', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 4096;
inline constexpr size_t kFingerprintChars = 64;

struct ShardHeader {
  uint32_t token_bytes = 2;
  uint64_t tokens = 0;
  uint64_t documents = 0;
  std::string tokenizer_fingerprint;  // kFingerprintChars hex digits

  uint64_t index_offset() const;  // where the document ends begin
  uint64_t file_size() const;     // what the whole file must measure
};

// The narrowest id width that holds every id of a vocabulary: 2 bytes up to 65536 ids, else 4.
uint32_t token_bytes_for(int64_t vocab_size);

// kShardHeaderBytes bytes.
std::string encode_shard_header(const ShardHeader& h);
// Reads and checks the header at the start of BYTES (the file's first bytes, FILE_SIZE in all):
// magic, version, id width, fingerprint and the size the counts imply. Throws a one-line
// k3::Error naming FILE and the byte offset of the first defect.
ShardHeader decode_shard_header(std::string_view bytes, uint64_t file_size,
                                const std::string& file);

}  // namespace k3::data::shards
