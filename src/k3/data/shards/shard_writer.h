// Writes a shard directory (shard_set.h): documents go to the train or the validation split, each
// split into files of about `shard_tokens` tokens (whole documents; a longer document makes one
// shard of its own). Memory stays bounded: ids are streamed to the open shard through a small
// buffer, and only its document index is held.
//
// Everything is written under a hidden sibling directory that finish() renames to DIR once the
// manifest is in it, so a run never reads a half-written directory; destroyed unfinished (an
// error, an interrupted prepare), the writer removes it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "k3/data/tokenizer.h"

namespace k3::data::shards {

enum class Split { train, validation };
const char* split_name(Split s);

inline constexpr int64_t kDefaultShardTokens = int64_t{1} << 26;  // 64 Mi tokens (128 MiB of u16)

struct SplitCounts {
  int64_t tokens = 0;  // eos included
  int64_t documents = 0;
};

class ShardDirectoryWriter {
 public:
  // DIR must not exist yet (a k3::Error naming it otherwise).
  ShardDirectoryWriter(std::string dir, const Tokenizer& tokenizer,
                       int64_t shard_tokens = kDefaultShardTokens);
  ~ShardDirectoryWriter();
  ShardDirectoryWriter(const ShardDirectoryWriter&) = delete;
  ShardDirectoryWriter& operator=(const ShardDirectoryWriter&) = delete;

  // Appends one document (ids in [0, vocab_size)) and the tokenizer's eos to SPLIT.
  void add(Split split, std::span<const int32_t> document);
  const SplitCounts& counts(Split split) const;
  // Closes the open shards, writes manifest.json (with DESCRIPTION under "source": what the
  // shards were made from) and renames the directory into place.
  void finish(const nlohmann::json& description = nlohmann::json::object());

 private:
  class SplitWriter;
  std::string dir_, staging_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<SplitWriter> train_, validation_;
  bool finished_ = false;
};

}  // namespace k3::data::shards
