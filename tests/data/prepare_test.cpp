#include "k3/data/shards/prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/base/fs.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/shards/input_documents.h"
#include "k3/data/shards/shard_set.h"

namespace k3::data::shards {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::vector<std::string> documents_of(const std::string& path) {
  InputDocuments in(path);
  std::vector<std::string> out;
  for (std::string d; in.next(d);) out.push_back(d);
  EXPECT_EQ(in.bytes_read(), in.total_bytes()) << path;
  return out;
}

// The documents of a token stream, each ended by eos.
std::vector<std::string> split_stream(const TokenView& stream) {
  const ByteTokenizer tok;
  std::vector<std::string> docs(1);
  for (int32_t id : stream.to_vector()) {
    if (id == tok.eos_id())
      docs.emplace_back();
    else
      docs.back() += static_cast<char>(id);
  }
  EXPECT_EQ(docs.back(), "") << "the stream does not end with eos";
  docs.pop_back();
  return docs;
}

TEST(InputDocuments, TextSplitsAtBlankLines) {
  TempDir tmp("k3_prepare");
  const std::string f = tmp.file("a.txt", "\n\nfirst line\nsecond\n\n \t\r\nnext\r\n\n\n\nlast");
  EXPECT_EQ(documents_of(f), (std::vector<std::string>{"first line\nsecond", "next\r", "last"}));
}

TEST(InputDocuments, JsonLinesTakeTheTextField) {
  TempDir tmp("k3_prepare");
  const std::string f = tmp.file(
      "a.jsonl", "{\"text\": \"one\\ntwo\", \"id\": 1}\n\n{\"text\": \"\"}\n{\"text\":\"3\"}\n");
  EXPECT_EQ(documents_of(f), (std::vector<std::string>{"one\ntwo", "3"}));
  const std::string bad = tmp.file("b.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  const std::string e = error_of([&] { documents_of(bad); });
  EXPECT_NE(e.find(bad), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

TEST(InputDocuments, DirectoriesReadTheirOwnFilesInNameOrder) {
  TempDir tmp("k3_prepare");
  tmp.file("b.jsonl", "{\"text\": \"from b\"}\n");
  tmp.file("a.txt", "from a\n\nagain a");  // no blank line at the end: still its own document
  tmp.file("c.md", "not an input");
  fs::create_directories(tmp.path() + "/sub");
  tmp.file("sub/d.txt", "in a subdirectory");
  EXPECT_EQ(documents_of(tmp.path()), (std::vector<std::string>{"from a", "again a", "from b"}));
  EXPECT_NE(error_of([&] { InputDocuments(tmp.path() + "/c.md"); }).find("expected a .txt"),
            std::string::npos);
  EXPECT_NE(error_of([&] { InputDocuments(tmp.path() + "/sub/none"); }).find("no such"),
            std::string::npos);
}

TEST(Prepare, ValidationTakesEveryKthDocumentExactly) {
  for (double f : {0.05, 0.1, 0.3, 0.5}) {
    int64_t n_val = 0;
    for (int64_t j = 0; j < 1000; ++j) {
      n_val += is_validation_document(j, f);
      EXPECT_EQ(n_val, static_cast<int64_t>(std::ceil((j + 1) * f - 1e-9))) << f << " " << j;
    }
  }
  EXPECT_TRUE(is_validation_document(0, 0.05) && is_validation_document(20, 0.05));
  EXPECT_FALSE(is_validation_document(19, 0.05) || is_validation_document(21, 0.05));
  for (int64_t j = 0; j < 100; ++j) EXPECT_FALSE(is_validation_document(j, 0.0));
}

// Input A: ten documents a0..a9, B: b0..b9, all of four bytes with their separator (three for
// the last). Weights 2 and 0.5: A is read twice, B up to the document crossing half its bytes.
class PrepareMix : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string a, b;
    for (int i = 0; i < 10; ++i) {
      a += (i ? "\n\na" : "a") + std::to_string(i);
      b += (i ? "\n\nb" : "b") + std::to_string(i);
    }
    spec_.inputs = {tmp_.file("a.txt", a + "\n"), tmp_.file("b.txt", b + "\n")};
    spec_.weights = {2, 0.5};
    spec_.val_fractions = {0};
    spec_.out = tmp_.path() + "/out";
  }
  TempDir tmp_{"k3_prepare"};
  PrepareSpec spec_;
  ByteTokenizer tok_;
};

TEST_F(PrepareMix, WeightsAreRepeatCountsInterleavedEvenly) {
  const PrepareSummary s = prepare_shards(spec_, tok_);
  EXPECT_EQ(s.inputs[0].train.documents, 20);
  EXPECT_EQ(s.inputs[1].train.documents, 5);  // b4 crosses half of B's 39 bytes
  const std::vector<std::string> docs = split_stream(ShardSet(spec_.out, tok_).train());
  ASSERT_EQ(docs.size(), 25u);
  std::vector<std::string> a, b;
  std::vector<int> a_between;  // A documents before each B document
  int run = 0;
  for (const std::string& d : docs) {
    if (d[0] == 'a') {
      a.push_back(d);
      ++run;
    } else {
      b.push_back(d);
      a_between.push_back(run);
      run = 0;
    }
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a[i], std::string("a") + std::to_string(i % 10));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b[i], std::string("b") + std::to_string(i));
  // A goes 4/78 of its goal per document, B 4/19.5: four A documents per B document.
  EXPECT_EQ(a_between[0], 1);  // a tie at 0 goes to the first input
  for (size_t i = 1; i < a_between.size(); ++i) EXPECT_EQ(a_between[i], 4) << i;
}

TEST_F(PrepareMix, SplitsAreDeterministicAndRepeatsStayInTheirSplit) {
  spec_.val_fractions = {0.25};
  const PrepareSummary s = prepare_shards(spec_, tok_);
  EXPECT_EQ(s.inputs[0].validation.documents, 2 * 3);  // a0, a4, a8 in each pass
  EXPECT_EQ(s.inputs[1].validation.documents, 2);      // b0, b4
  const ShardSet set(spec_.out, tok_);
  for (const std::string& d : split_stream(set.validation())) {
    const int j = d[1] - '0';
    EXPECT_TRUE(is_validation_document(j, 0.25)) << d;
  }
  for (const std::string& d : split_stream(set.train()))
    EXPECT_FALSE(is_validation_document(d[1] - '0', 0.25)) << d;
  const PrepareSpec first = spec_;
  spec_.out = tmp_.path() + "/again";
  prepare_shards(spec_, tok_);
  for (const char* f : {"train-00000.k3shard", "validation-00000.k3shard"})
    EXPECT_EQ(read_file(first.out + "/" + f), read_file(spec_.out + "/" + f)) << f;
}

TEST_F(PrepareMix, AFractionPerInputKeepsASplitMadeBeforehand) {
  spec_.weights = {1, 1};
  spec_.val_fractions = {0, 1};  // a: all training; b: all validation
  const PrepareSummary s = prepare_shards(spec_, tok_);
  EXPECT_EQ(s.inputs[0].train.documents, 10);
  EXPECT_EQ(s.inputs[0].validation.documents, 0);
  EXPECT_EQ(s.inputs[1].train.documents, 0);
  EXPECT_EQ(s.inputs[1].validation.documents, 10);
  const ShardSet set(spec_.out, tok_);
  for (const std::string& d : split_stream(set.train())) EXPECT_EQ(d[0], 'a') << d;
  for (const std::string& d : split_stream(set.validation())) EXPECT_EQ(d[0], 'b') << d;
  spec_.val_fractions = {0, 1, 0};
  spec_.out = tmp_.path() + "/three";
  const std::string e = error_of([&] { prepare_shards(spec_, tok_); });
  EXPECT_NE(e.find("3 validation fractions for 2 inputs"), std::string::npos) << e;
  spec_.val_fractions = {1.5};
  EXPECT_NE(error_of([&] { prepare_shards(spec_, tok_); }).find("[0, 1], got 1.5"),
            std::string::npos);
}

TEST_F(PrepareMix, AFailedPrepareLeavesNoDirectory) {
  spec_.inputs.push_back(tmp_.file("c.jsonl", "{\"text\": \"fine\"}\nnot json\n"));
  spec_.weights.push_back(1);
  const std::string e = error_of([&] { prepare_shards(spec_, tok_); });
  EXPECT_NE(e.find("c.jsonl"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(spec_.out));
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp_.path()))
    EXPECT_EQ(entry.path().filename().string().find(".out"), std::string::npos) << entry.path();
  spec_.weights = {1, 2};
  EXPECT_NE(error_of([&] { prepare_shards(spec_, tok_); }).find("field weights"),
            std::string::npos);
}

}  // namespace
}  // namespace k3::data::shards
