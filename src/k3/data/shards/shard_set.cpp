#include "k3/data/shards/shard_set.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::data::shards {

namespace {

using json = nlohmann::json;

// manifest[key] of the given JSON type, or a k3::Error naming the manifest and the key.
const json& member(const json& j, const char* key, json::value_t type, const std::string& path,
                   const std::string& where) {
  const bool ok = j.is_object() && j.contains(key) &&
                  (j[key].type() == type ||
                   (type == json::value_t::number_unsigned &&
                    j[key].type() == json::value_t::number_integer && j[key].get<int64_t>() >= 0));
  K3_CHECK_CTX(ok, (ErrorContext{path, where + key, -1}), "missing or of the wrong type");
  return j[key];
}

}  // namespace

ShardSet::ShardSet(std::string dir, const Tokenizer& tokenizer) : dir_(std::move(dir)) {
  const std::string path = dir_ + "/" + kManifestFile;
  K3_CHECK_CTX(file_exists(path), (ErrorContext{dir_, "", -1}), "not a shard directory: no ",
               kManifestFile, " (made by `k3lab data prepare`)");
  const std::string text = read_file(path);
  manifest_sha256_ = sha256_hex(text);
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(std::string("malformed JSON (") + e.what() + ")", ErrorContext{path, "", -1});
  }
  using T = json::value_t;
  K3_CHECK_CTX(member(m, "format", T::string, path, "") == kManifestFormat &&
                   member(m, "version", T::number_unsigned, path, "") == kShardVersion,
               (ErrorContext{path, "version", -1}), "expected ", kManifestFormat, " version ",
               kShardVersion);
  const json& tok = member(m, "tokenizer", T::object, path, "");
  const std::string made_by = member(tok, "fingerprint", T::string, path, "tokenizer.");
  const std::string made_by_name = member(tok, "name", T::string, path, "tokenizer.");
  K3_CHECK_CTX(made_by == tokenizer.fingerprint(), (ErrorContext{dir_, "", -1}),
               "shards made by the ", made_by_name, " tokenizer (fingerprint ", made_by,
               "), but the run's ", tokenizer.name(), " tokenizer has fingerprint ",
               tokenizer.fingerprint(), ": prepare them again with the run's tokenizer");
  const json& splits = member(m, "splits", T::object, path, "");
  for (const char* name : {"train", "validation"}) {
    const std::string at = std::string("splits.") + name + ".";
    const json& split = member(splits, name, T::object, path, "splits.");
    TokenView& view = std::string(name) == "train" ? train_ : validation_;
    int64_t& documents = std::string(name) == "train" ? train_documents_ : validation_documents_;
    for (const json& entry : member(split, "shards", T::array, path, at)) {
      const std::string file =
          dir_ + "/" + member(entry, "file", T::string, path, at).get<std::string>();
      ShardFile shard(file);
      const ShardHeader& h = shard.header();
      const ErrorContext ctx{file, "", -1};
      K3_CHECK_CTX(h.tokenizer_fingerprint == made_by, ctx, "tokenizer fingerprint ",
                   h.tokenizer_fingerprint, " at byte 32 differs from the manifest's ", made_by);
      const uint64_t tokens = member(entry, "tokens", T::number_unsigned, path, at);
      const uint64_t docs = member(entry, "documents", T::number_unsigned, path, at);
      K3_CHECK_CTX(h.tokens == tokens && h.documents == docs, ctx, "the header counts ", h.tokens,
                   " tokens (byte 16) and ", h.documents, " documents (byte 24), the manifest ",
                   tokens, " and ", docs);
      shard.append_to(view);
      documents += static_cast<int64_t>(h.documents);
      files_.push_back(std::move(shard));
    }
    K3_CHECK_CTX(view.size() == member(split, "tokens", T::number_unsigned, path, at) &&
                     documents == member(split, "documents", T::number_unsigned, path, at),
                 (ErrorContext{path, at + "tokens", -1}), "the ", name, " split's shards hold ",
                 view.size(), " tokens and ", documents, " documents, not what the manifest says");
  }
  K3_CHECK_CTX(!train_.empty(), (ErrorContext{path, "splits.train", -1}), "no training tokens");
}

}  // namespace k3::data::shards
