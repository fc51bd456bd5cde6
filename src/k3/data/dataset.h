// Token datasets: the built-in corpus, a text file, or a directory of .txt files, tokenized into a
// training and a validation stream; or a shard directory (shards/shard_set.h), mapped in place.
// Each document is encoded and followed by the tokenizer's eos.
//
// Splits are deterministic. The corpus and a directory split by documents: the last
// round(fraction * documents) documents (at least one, never all) are the validation split. A
// single file (also a directory holding one .txt file) splits by bytes: its last round(fraction *
// bytes) bytes (at least one, never all) are the validation document. A fraction of 0 means no
// validation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "k3/data/token_view.h"
#include "k3/data/tokenizer.h"

namespace k3::data {

namespace shards {
class ShardSet;
}

struct TokenDataset {
  std::string source;               // "corpus (seed S)", the path read, or "shards DIR"
  std::vector<int32_t> train;       // in memory; empty for shards
  std::vector<int32_t> validation;  // in memory; empty for shards
  int64_t train_documents = 0;
  int64_t validation_documents = 0;
  std::shared_ptr<const shards::ShardSet> shards;  // the mapped splits of a shard directory

  // The splits whichever way they are held.
  TokenView train_tokens() const;
  TokenView validation_tokens() const;
};

struct DatasetSpec {
  std::string source = "corpus";      // "corpus", a text file, or a directory of .txt files
  uint64_t seed = 0;                  // corpus only
  int64_t corpus_tokens = 4'000'000;  // corpus only: whole documents until at least this many
  double validation_fraction = 0.05;  // in [0, 1)
};

// Errors are k3::Errors naming the path (missing, empty, a directory without .txt files) or the
// field (validation_fraction, corpus_tokens) and what was expected.
TokenDataset load_dataset(const DatasetSpec& spec, const Tokenizer& tokenizer);

// A shard directory made with TOKENIZER (errors: shards/shard_set.h).
TokenDataset shard_dataset(const std::string& dir, const Tokenizer& tokenizer);

TokenDataset corpus_dataset(uint64_t seed, int64_t tokens, double validation_fraction,
                            const Tokenizer& tokenizer);
TokenDataset text_file_dataset(const std::string& path, double validation_fraction,
                               const Tokenizer& tokenizer);
// The directory's own *.txt files (not its subdirectories), in byte order of their names.
TokenDataset text_directory_dataset(const std::string& dir, double validation_fraction,
                                    const Tokenizer& tokenizer);

}  // namespace k3::data
