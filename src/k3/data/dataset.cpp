#include "k3/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/data/corpus.h"
#include "k3/data/shards/shard_set.h"

namespace k3::data {
namespace {

namespace fs = std::filesystem;

void check_fraction(double fraction) {
  K3_CHECK_CTX(fraction >= 0 && fraction < 1, (ErrorContext{"", "validation_fraction", -1}),
               "expected a fraction in [0, 1), got ", fraction);
}

// How many of `count` units go to validation: none for a zero fraction, else at least one and
// never all.
int64_t validation_share(int64_t count, double fraction, const std::string& path,
                         const char* units) {
  if (fraction == 0) return 0;
  K3_CHECK_CTX(count >= 2, (ErrorContext{path, "validation_fraction", -1}), "cannot split ", count,
               " ", units, " into training and validation parts: expected at least 2");
  return std::clamp<int64_t>(std::llround(fraction * static_cast<double>(count)), 1, count - 1);
}

void append_document(std::vector<int32_t>& stream, std::string_view text,
                     const Tokenizer& tokenizer) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  stream.insert(stream.end(), ids.begin(), ids.end());
  stream.push_back(tokenizer.eos_id());
}

std::string read_text(const std::string& path) {
  std::error_code ec;
  K3_CHECK_CTX(fs::is_regular_file(path, ec), (ErrorContext{path, "", -1}),
               fs::exists(path, ec) ? "not a regular file, expected a text file"
                                    : "no such file, expected a text file");
  std::string text = read_file(path);
  if (text.empty()) throw Error("the file is empty, expected text", ErrorContext{path, "", -1});
  return text;
}

}  // namespace

TokenView TokenDataset::train_tokens() const { return shards ? shards->train() : TokenView(train); }

TokenView TokenDataset::validation_tokens() const {
  return shards ? shards->validation() : TokenView(validation);
}

TokenDataset shard_dataset(const std::string& dir, const Tokenizer& tokenizer) {
  TokenDataset ds;
  auto set = std::make_shared<const shards::ShardSet>(dir, tokenizer);
  ds.source = "shards " + dir;
  ds.train_documents = set->train_documents();
  ds.validation_documents = set->validation_documents();
  ds.shards = std::move(set);
  return ds;
}

TokenDataset corpus_dataset(uint64_t seed, int64_t tokens, double validation_fraction,
                            const Tokenizer& tokenizer) {
  K3_CHECK_CTX(tokens >= 1, (ErrorContext{"", "corpus_tokens", -1}),
               "expected at least 1 token, got ", tokens);
  check_fraction(validation_fraction);
  const Corpus corpus(seed);
  std::vector<std::vector<int32_t>> documents;  // encoded, eos included
  // Validation needs a document of its own, so a split corpus has at least two.
  const size_t min_documents = validation_fraction > 0 ? 2 : 1;
  for (int64_t total = 0; total < tokens || documents.size() < min_documents;) {
    documents.emplace_back();
    append_document(documents.back(), corpus.document(static_cast<int64_t>(documents.size()) - 1),
                    tokenizer);
    total += static_cast<int64_t>(documents.back().size());
  }
  const int64_t n = static_cast<int64_t>(documents.size());
  const int64_t num_validation = validation_share(n, validation_fraction, "corpus", "documents");

  TokenDataset ds;
  ds.source = "corpus (seed " + std::to_string(seed) + ")";
  ds.train_documents = n - num_validation;
  ds.validation_documents = num_validation;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t>& split = i < ds.train_documents ? ds.train : ds.validation;
    split.insert(split.end(), documents[i].begin(), documents[i].end());
  }
  return ds;
}

TokenDataset text_file_dataset(const std::string& path, double validation_fraction,
                               const Tokenizer& tokenizer) {
  check_fraction(validation_fraction);
  const std::string text = read_text(path);
  const int64_t size = static_cast<int64_t>(text.size());
  const int64_t validation_bytes = validation_share(size, validation_fraction, path, "bytes");
  TokenDataset ds;
  ds.source = path;
  append_document(ds.train, std::string_view(text).substr(0, size - validation_bytes), tokenizer);
  ds.train_documents = 1;
  if (validation_bytes > 0) {
    append_document(ds.validation, std::string_view(text).substr(size - validation_bytes),
                    tokenizer);
    ds.validation_documents = 1;
  }
  return ds;
}

TokenDataset text_directory_dataset(const std::string& dir, double validation_fraction,
                                    const Tokenizer& tokenizer) {
  check_fraction(validation_fraction);
  std::error_code ec;
  K3_CHECK_CTX(fs::is_directory(dir, ec), (ErrorContext{dir, "", -1}),
               "expected a directory of .txt files");
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".txt")
      files.push_back(entry.path().string());
  K3_CHECK_CTX(!files.empty(), (ErrorContext{dir, "", -1}),
               "the directory holds no .txt files, expected at least one");
  std::sort(files.begin(), files.end());
  if (files.size() == 1) {
    TokenDataset ds = text_file_dataset(files[0], validation_fraction, tokenizer);
    ds.source = dir;
    return ds;
  }

  const int64_t n = static_cast<int64_t>(files.size());
  TokenDataset ds;
  ds.source = dir;
  ds.validation_documents = validation_share(n, validation_fraction, dir, "files");
  ds.train_documents = n - ds.validation_documents;
  for (int64_t i = 0; i < n; ++i)
    append_document(i < ds.train_documents ? ds.train : ds.validation, read_text(files[i]),
                    tokenizer);
  return ds;
}

TokenDataset load_dataset(const DatasetSpec& spec, const Tokenizer& tokenizer) {
  if (spec.source == "corpus")
    return corpus_dataset(spec.seed, spec.corpus_tokens, spec.validation_fraction, tokenizer);
  std::error_code ec;
  const fs::file_status status = fs::status(spec.source, ec);
  K3_CHECK_CTX(fs::exists(status), (ErrorContext{spec.source, "", -1}),
               "no such file or directory, expected a text file or a directory of .txt files");
  if (fs::is_directory(status))
    return text_directory_dataset(spec.source, spec.validation_fraction, tokenizer);
  return text_file_dataset(spec.source, spec.validation_fraction, tokenizer);
}

}  // namespace k3::data
