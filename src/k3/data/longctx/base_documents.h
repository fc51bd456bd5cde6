// The base documents long-context tasks are filled with: token sequences (no eos inside), either
// held in memory or read in place from a shard directory's memory-mapped train split, so a base
// of billions of tokens is never copied; only the documents a task draws are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "k3/data/token_view.h"
#include "k3/data/tokenizer.h"

namespace k3::data {

class BaseDocuments {
 public:
  BaseDocuments() = default;
  explicit BaseDocuments(const std::vector<std::vector<int32_t>>& documents);  // copies them
  // The documents of a shard directory's train split; a one-line k3::Error naming DIR when it is
  // not a shard directory of TOKENIZER.
  static BaseDocuments from_shards(const std::string& dir, const Tokenizer& tokenizer);

  int64_t size() const { return static_cast<int64_t>(begin_.size()); }
  int64_t length(int64_t i) const { return length_[static_cast<size_t>(i)]; }
  int64_t total_tokens() const { return total_; }
  const std::string& origin() const { return origin_; }  // the shard directory, or ""
  // The first COUNT tokens of document I, appended to OUT.
  void append(int64_t i, int64_t count, std::vector<int32_t>& out) const;
  std::vector<int32_t> document(int64_t i) const;

 private:
  void add(int64_t begin, int64_t length);

  std::shared_ptr<const void> owner_;  // what TOKENS_ points into: a vector or a ShardSet
  TokenView tokens_;
  std::vector<int64_t> begin_, length_;
  int64_t total_ = 0;
  std::string origin_;
};

}  // namespace k3::data
