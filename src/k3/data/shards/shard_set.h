// A shard directory: manifest.json and the shard files of its two splits, "train-00000.k3shard"
// ... and "validation-00000.k3shard" ... (shard_format.h). The manifest names each split's
// files in order with their token and document counts and a SHA-256 of their ids and index, the
// tokenizer (name, fingerprint, vocab_size, eos_id), and what the shards were made from.
//
// Opening maps every shard (nothing is copied) and checks it against the manifest; each split is
// one TokenView over its shards in order, every document followed by the tokenizer's eos.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/data/shards/shard_file.h"
#include "k3/data/token_view.h"
#include "k3/data/tokenizer.h"

namespace k3::data::shards {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kManifestFormat = "k3lab token shards";

class ShardSet {
 public:
  // Throws a one-line k3::Error naming the file (and byte offset) at fault: a missing or
  // malformed manifest or shard, counts that disagree, or shards made by another tokenizer than
  // TOKENIZER (naming both fingerprints).
  ShardSet(std::string dir, const Tokenizer& tokenizer);

  const std::string& dir() const { return dir_; }
  const TokenView& train() const { return train_; }
  const TokenView& validation() const { return validation_; }
  int64_t train_documents() const { return train_documents_; }
  int64_t validation_documents() const { return validation_documents_; }
  // SHA-256 of the manifest, which holds every shard's own SHA-256: identifies the data without
  // reading it.
  const std::string& manifest_sha256() const { return manifest_sha256_; }
  const std::vector<ShardFile>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<ShardFile> files_;
  TokenView train_, validation_;
  int64_t train_documents_ = 0, validation_documents_ = 0;
  std::string manifest_sha256_;
};

}  // namespace k3::data::shards
