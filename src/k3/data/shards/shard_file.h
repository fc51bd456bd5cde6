// One token shard file (shard_format.h), memory-mapped read-only and checked: header, size, and
// a document index that is strictly increasing and ends at the token count. The ids are not
// read here; pages are brought in as batches touch them.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "k3/data/shards/shard_format.h"
#include "k3/data/token_view.h"

namespace k3::data::shards {

class ShardFile {
 public:
  // Throws a one-line k3::Error naming PATH and the byte offset of the first defect.
  explicit ShardFile(std::string path);
  ~ShardFile();
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&&) = delete;
  ShardFile(const ShardFile&) = delete;

  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // The ids in place (header().token_bytes wide), to append to a TokenView.
  const void* token_data() const;
  void append_to(TokenView& view) const;
  std::span<const uint64_t> document_ends() const;

 private:
  std::string path_;
  ShardHeader header_;
  const char* map_ = nullptr;
  uint64_t map_bytes_ = 0;
};

}  // namespace k3::data::shards
