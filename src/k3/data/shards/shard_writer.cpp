#include "k3/data/shards/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/data/shards/shard_format.h"
#include "k3/data/shards/shard_set.h"

namespace k3::data::shards {

namespace fs = std::filesystem;

const char* split_name(Split s) { return s == Split::train ? "train" : "validation"; }

// One split's shard files, "SPLIT-00000.k3shard" onwards: the open one is written through a
// buffer, its header (whose counts are known only at the end) written last over the placeholder.
class ShardDirectoryWriter::SplitWriter {
 public:
  SplitWriter(std::string dir, Split split, const Tokenizer& tokenizer, int64_t shard_tokens)
      : dir_(std::move(dir)),
        split_(split),
        shard_tokens_(shard_tokens),
        vocab_(tokenizer.vocab_size()),
        eos_(tokenizer.eos_id()) {
    header_.token_bytes = token_bytes_for(tokenizer.vocab_size());
    header_.tokenizer_fingerprint = tokenizer.fingerprint();
  }
  ~SplitWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  void add(std::span<const int32_t> document) {
    if (fd_ >= 0 &&
        static_cast<int64_t>(header_.tokens) + static_cast<int64_t>(document.size()) + 1 >
            shard_tokens_ &&
        header_.tokens > 0)
      close_shard();
    if (fd_ < 0) open_shard();
    for (int32_t id : document) {
      K3_CHECK(id >= 0 && id < vocab_, "token id ", id, " outside the tokenizer's vocabulary of ",
               vocab_);
      put(id);
    }
    put(eos_);
    header_.tokens += document.size() + 1;
    ends_.push_back(header_.tokens);
    counts_.tokens += static_cast<int64_t>(document.size()) + 1;
    counts_.documents += 1;
  }

  // The manifest's entry for the split.
  nlohmann::json finish() {
    if (fd_ >= 0) close_shard();
    return {{"tokens", counts_.tokens}, {"documents", counts_.documents}, {"shards", shards_}};
  }

  const SplitCounts& counts() const { return counts_; }

 private:
  void open_shard() {
    path_ = strprintf("%s/%s-%05zu.k3shard", dir_.c_str(), split_name(split_), shards_.size());
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    K3_CHECK_CTX(fd_ >= 0, (ErrorContext{path_, "", -1}), "cannot create: ", std::strerror(errno));
    header_.tokens = header_.documents = 0;
    ends_.clear();
    hash_ = Sha256();
    written_ = 0;
    write_raw(std::string(kShardHeaderBytes, '\0'));  // the placeholder
  }

  void put(int32_t id) {
    const uint32_t v = static_cast<uint32_t>(id);
    buffer_.append(reinterpret_cast<const char*>(&v), header_.token_bytes);  // little-endian host
    if (buffer_.size() >= kBufferBytes) flush();
  }

  void flush() {
    hash_.update(buffer_);
    write_raw(buffer_);
    buffer_.clear();
  }

  void write_raw(std::string_view bytes) {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      K3_CHECK_CTX(n > 0, (ErrorContext{path_, "", -1}), "write failed at byte ", written_ + done,
                   ": ", std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    written_ += bytes.size();
  }

  void close_shard() {
    header_.documents = ends_.size();
    buffer_.append(
        header_.index_offset() - kShardHeaderBytes - header_.tokens * header_.token_bytes, '\0');
    buffer_.append(reinterpret_cast<const char*>(ends_.data()), ends_.size() * sizeof(uint64_t));
    flush();
    const std::string header = encode_shard_header(header_);
    const ErrorContext ctx{path_, "", -1};
    K3_CHECK_CTX(
        ::pwrite(fd_, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()) &&
            ::fsync(fd_) == 0,
        ctx, "cannot write the header: ", std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    shards_.push_back({{"file", fs::path(path_).filename().string()},
                       {"tokens", header_.tokens},
                       {"documents", header_.documents},
                       {"sha256", hash_.hex_digest()}});
  }

  static constexpr size_t kBufferBytes = size_t{1} << 20;
  std::string dir_;
  Split split_;
  int64_t shard_tokens_;
  int32_t vocab_, eos_;
  ShardHeader header_;  // of the open shard
  std::string path_;    // of the open shard
  int fd_ = -1;
  uint64_t written_ = 0;
  std::string buffer_;
  std::vector<uint64_t> ends_;
  Sha256 hash_;  // of the open shard's ids and index
  SplitCounts counts_;
  nlohmann::json shards_ = nlohmann::json::array();
};

ShardDirectoryWriter::ShardDirectoryWriter(std::string dir, const Tokenizer& tokenizer,
                                           int64_t shard_tokens)
    : dir_(std::move(dir)), tokenizer_(tokenizer) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  const ErrorContext ctx{dir_, "", -1};
  K3_CHECK_CTX(shard_tokens >= 1, (ErrorContext{"", "shard_tokens", -1}),
               "expected at least 1 token per shard, got ", shard_tokens);
  K3_CHECK_CTX(!fs::exists(dir_), ctx, "already exists: choose another output directory");
  const fs::path target(dir_);
  // A named string: `"." + <temporary string>` inserts in front, which GCC 12 reports as an
  // overlapping memcpy (-Wrestrict, a false positive).
  const std::string name = target.filename().string();
  staging_ =
      (target.parent_path() / ("." + name + ".partial-" + std::to_string(::getpid()))).string();
  std::error_code ec;
  fs::remove_all(staging_, ec);
  fs::create_directories(staging_, ec);
  K3_CHECK_CTX(!ec, (ErrorContext{staging_, "", -1}), "cannot create: ", ec.message());
  train_ = std::make_unique<SplitWriter>(staging_, Split::train, tokenizer, shard_tokens);
  validation_ = std::make_unique<SplitWriter>(staging_, Split::validation, tokenizer, shard_tokens);
}

ShardDirectoryWriter::~ShardDirectoryWriter() {
  if (finished_) return;
  train_.reset();
  validation_.reset();
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void ShardDirectoryWriter::add(Split split, std::span<const int32_t> document) {
  (split == Split::train ? train_ : validation_)->add(document);
}

const SplitCounts& ShardDirectoryWriter::counts(Split split) const {
  return (split == Split::train ? train_ : validation_)->counts();
}

void ShardDirectoryWriter::finish(const nlohmann::json& description) {
  K3_CHECK_CTX(train_->counts().documents > 0, (ErrorContext{dir_, "", -1}),
               "no training documents: the inputs hold no text");
  nlohmann::json manifest = {
      {"format", kManifestFormat},
      {"version", kShardVersion},
      {"tokenizer",
       {{"name", tokenizer_.name()},
        {"fingerprint", tokenizer_.fingerprint()},
        {"vocab_size", tokenizer_.vocab_size()},
        {"eos_id", tokenizer_.eos_id()}}},
      {"token_bytes", token_bytes_for(tokenizer_.vocab_size())},
      {"splits", {{"train", train_->finish()}, {"validation", validation_->finish()}}},
      {"source", description}};
  write_file_atomic(staging_ + "/" + kManifestFile, manifest.dump(2) + "\n");
  std::error_code ec;
  fs::rename(staging_, dir_, ec);
  K3_CHECK_CTX(!ec, (ErrorContext{dir_, "", -1}), "cannot rename ", staging_,
               " into place: ", ec.message());
  finished_ = true;
}

}  // namespace k3::data::shards
