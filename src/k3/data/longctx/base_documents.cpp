#include "k3/data/longctx/base_documents.h"

#include <algorithm>

#include "k3/data/shards/shard_set.h"

namespace k3::data {

void BaseDocuments::add(int64_t begin, int64_t length) {
  begin_.push_back(begin);
  length_.push_back(length);
  total_ += length;
}

BaseDocuments::BaseDocuments(const std::vector<std::vector<int32_t>>& documents) {
  auto all = std::make_shared<std::vector<int32_t>>();
  for (const auto& doc : documents) {
    add(static_cast<int64_t>(all->size()), static_cast<int64_t>(doc.size()));
    all->insert(all->end(), doc.begin(), doc.end());
  }
  tokens_ = TokenView(*all);
  owner_ = std::move(all);
}

BaseDocuments BaseDocuments::from_shards(const std::string& dir, const Tokenizer& tokenizer) {
  auto set = std::make_shared<shards::ShardSet>(dir, tokenizer);
  BaseDocuments b;
  b.origin_ = dir;
  b.tokens_ = set->train();
  b.owner_ = std::move(set);
  // Every document ends with an eos: find them a block at a time.
  const int64_t n = b.tokens_.size(), block = int64_t{1} << 20;
  std::vector<int32_t> ids(static_cast<size_t>(std::min(n, block)));
  int64_t start = 0;
  for (int64_t at = 0; at < n; at += block) {
    const int64_t count = std::min(block, n - at);
    b.tokens_.copy(at, count, ids.data());
    for (int64_t i = 0; i < count; ++i)
      if (ids[static_cast<size_t>(i)] == tokenizer.eos_id()) {
        b.add(start, at + i - start);
        start = at + i + 1;
      }
  }
  return b;
}

void BaseDocuments::append(int64_t i, int64_t count, std::vector<int32_t>& out) const {
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(count));
  tokens_.copy(begin_[static_cast<size_t>(i)], count, out.data() + at);
}

std::vector<int32_t> BaseDocuments::document(int64_t i) const {
  std::vector<int32_t> out;
  append(i, length(i), out);
  return out;
}

}  // namespace k3::data
