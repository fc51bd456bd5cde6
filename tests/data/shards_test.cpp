#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/base/checksum.h"
#include "k3/base/fs.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/shards/shard_set.h"
#include "k3/data/shards/shard_writer.h"

namespace k3::data::shards {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

// A vocabulary too large for 16-bit ids.
class WideTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "wide"; }
  int32_t vocab_size() const override { return 70000; }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t>) const override { return ""; }
  int32_t bos_id() const override { return 69997; }
  int32_t eos_id() const override { return 69998; }
  int32_t pad_id() const override { return 69999; }
  std::string fingerprint() const override { return sha256_hex("wide"); }
};

std::vector<int32_t> ids(std::initializer_list<int32_t> l) { return l; }

// Writes DOCS (split by index: every third one to validation) with SHARD_TOKENS per shard.
void write_docs(const std::string& dir, const Tokenizer& tok,
                const std::vector<std::vector<int32_t>>& docs, int64_t shard_tokens) {
  ShardDirectoryWriter w(dir, tok, shard_tokens);
  for (size_t i = 0; i < docs.size(); ++i)
    w.add(i % 3 == 2 ? Split::validation : Split::train, docs[i]);
  w.finish({{"note", "test"}});
}

// The expected stream: DOCS of the split, each followed by EOS.
std::vector<int32_t> stream_of(const std::vector<std::vector<int32_t>>& docs, bool validation,
                               int32_t eos) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < docs.size(); ++i) {
    if ((i % 3 == 2) != validation) continue;
    out.insert(out.end(), docs[i].begin(), docs[i].end());
    out.push_back(eos);
  }
  return out;
}

TEST(Shards, RoundTripOverSeveralShards) {
  TempDir tmp("k3_shards");
  const ByteTokenizer tok;
  std::vector<std::vector<int32_t>> docs;
  for (int i = 0; i < 40; ++i) {
    docs.emplace_back();
    for (int k = 0; k <= i % 7; ++k) docs.back().push_back((i * 31 + k * 7) % 256);
  }
  const std::string dir = tmp.path() + "/out";
  write_docs(dir, tok, docs, 10);
  const ShardSet set(dir, tok);
  EXPECT_EQ(set.train().to_vector(), stream_of(docs, false, tok.eos_id()));
  EXPECT_EQ(set.validation().to_vector(), stream_of(docs, true, tok.eos_id()));
  EXPECT_EQ(set.train_documents(), 27);
  EXPECT_EQ(set.validation_documents(), 13);
  EXPECT_GT(set.files().size(), 4u);  // shards of at most 10 tokens (whole documents)
  for (const ShardFile& f : set.files()) {
    EXPECT_EQ(f.header().token_bytes, 2u);
    EXPECT_LE(f.header().tokens, 10u);
    EXPECT_EQ(fs::file_size(f.path()), f.header().file_size());
  }
  // A window that crosses shards reads across them.
  std::vector<int32_t> window(25);
  set.train().copy(3, 25, window.data());
  const std::vector<int32_t> whole = stream_of(docs, false, tok.eos_id());
  EXPECT_EQ(window, std::vector<int32_t>(whole.begin() + 3, whole.begin() + 28));
}

TEST(Shards, WideVocabulariesUse32BitIds) {
  TempDir tmp("k3_shards");
  const WideTokenizer tok;
  const std::vector<std::vector<int32_t>> docs = {{65535, 65536, 69000}, {1}, {69996, 0}};
  write_docs(tmp.path() + "/out", tok, docs, 100);
  const ShardSet set(tmp.path() + "/out", tok);
  EXPECT_EQ(set.files()[0].header().token_bytes, 4u);
  EXPECT_EQ(set.train().to_vector(), stream_of(docs, false, tok.eos_id()));
  EXPECT_EQ(set.validation().to_vector(), stream_of(docs, true, tok.eos_id()));
}

TEST(Shards, AnotherTokenizersShardsAreRefusedNamingBothFingerprints) {
  TempDir tmp("k3_shards");
  write_docs(tmp.path() + "/out", WideTokenizer(), {{1, 2}, {3}}, 100);
  const std::string e = error_of([&] { ShardSet(tmp.path() + "/out", ByteTokenizer()); });
  EXPECT_NE(e.find(WideTokenizer().fingerprint()), std::string::npos) << e;
  EXPECT_NE(e.find(ByteTokenizer().fingerprint()), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Shards, UnfinishedWritesLeaveNothingAndAnExistingDirectoryIsKept) {
  TempDir tmp("k3_shards");
  const ByteTokenizer tok;
  const std::string dir = tmp.path() + "/out";
  {
    ShardDirectoryWriter w(dir, tok, 4);
    w.add(Split::train, ids({1, 2, 3}));
    w.add(Split::train, ids({4, 5, 6}));
  }  // abandoned: an error or an interrupt in the middle of a prepare
  EXPECT_TRUE(fs::is_empty(tmp.path())) << "a half-written directory was left behind";
  EXPECT_NE(error_of([&] { ShardDirectoryWriter(dir, tok).add(Split::train, ids({300})); }), "");
  EXPECT_TRUE(fs::is_empty(tmp.path()));
  fs::create_directories(dir);
  EXPECT_NE(error_of([&] { ShardDirectoryWriter w(dir, tok); }).find("already exists"),
            std::string::npos);
}

// Malformed shards: each defect is refused in one line naming the file and the byte offset.
class MalformedShard : public ::testing::Test {
 protected:
  void SetUp() override {
    write_docs(dir_, tok_, {{1, 2, 3}, {4, 5}, {6}, {7, 8, 9}}, 100);
    file_ = dir_ + "/train-00000.k3shard";
    bytes_ = read_file(file_);
  }
  void patch(size_t at, const void* data, size_t n) { std::memcpy(bytes_.data() + at, data, n); }
  // The error of opening the directory with the shard file replaced by bytes_.
  std::string error() {
    std::ofstream(file_, std::ios::binary | std::ios::trunc) << bytes_;
    const std::string e = error_of([&] { ShardSet(dir_, tok_); });
    EXPECT_NE(e.find(file_), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  }
  TempDir tmp_{"k3_shards"};
  std::string dir_ = tmp_.path() + "/out";
  ByteTokenizer tok_;
  std::string file_, bytes_;
};

TEST_F(MalformedShard, Intact) {
  EXPECT_EQ(error_of([&] { ShardSet(dir_, tok_); }), "");
}

TEST_F(MalformedShard, BadMagic) {
  bytes_[1] = 'X';
  EXPECT_NE(error().find("at byte 0"), std::string::npos);
}

TEST_F(MalformedShard, BadVersion) {
  const uint32_t v = 9;
  patch(8, &v, 4);
  EXPECT_NE(error().find("version 9 at byte 8"), std::string::npos);
}

TEST_F(MalformedShard, Truncated) {
  bytes_.resize(bytes_.size() - 3);
  EXPECT_NE(error().find("truncated at byte " + std::to_string(bytes_.size())), std::string::npos);
  bytes_.resize(100);
  EXPECT_NE(error().find("truncated at byte 100"), std::string::npos);
}

TEST_F(MalformedShard, CountsDisagreeWithTheManifest) {
  // The three train documents (11 tokens) indexed as one: a consistent file, but the manifest
  // counts three.
  const size_t index = bytes_.size() - 3 * 8;
  const uint64_t docs = 1, end = 11;
  patch(24, &docs, 8);
  patch(index, &end, 8);
  bytes_.resize(index + 8);
  EXPECT_NE(error().find("documents (byte 24)"), std::string::npos);
}

TEST_F(MalformedShard, IndexOutOfOrder) {
  // The train split holds documents 0, 1, 3 (4, 3 and 4 tokens): ends 4 7 11.
  const size_t index = bytes_.size() - 3 * 8;
  const uint64_t swapped[2] = {7, 4};
  patch(index, swapped, sizeof swapped);
  EXPECT_NE(error().find("out of order"), std::string::npos);
  EXPECT_NE(error().find("at byte " + std::to_string(index + 8)), std::string::npos);
}

TEST_F(MalformedShard, IndexEndsShort) {
  const uint64_t short_end = 10;
  patch(bytes_.size() - 8, &short_end, 8);
  EXPECT_NE(error().find("ends at token 10"), std::string::npos);
}

}  // namespace
}  // namespace k3::data::shards
