#include "k3/data/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/corpus.h"

namespace k3::data {
namespace {

namespace fs = std::filesystem;

// The k3::Error a call throws; fails the test when it throws none.
template <typename F>
Error error_from(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a k3::Error";
  return Error("none");
}

int64_t count_eos(const std::vector<int32_t>& tokens) {
  return std::count(tokens.begin(), tokens.end(), ByteTokenizer::kEos);
}

}  // namespace

TEST(Dataset, CorpusSplitsByDocuments) {
  ByteTokenizer tok;
  const TokenDataset ds = corpus_dataset(4, 200000, 0.1, tok);
  const int64_t documents = ds.train_documents + ds.validation_documents;
  EXPECT_GE(static_cast<int64_t>(ds.train.size() + ds.validation.size()), 200000);
  EXPECT_EQ(ds.validation_documents, std::llround(0.1 * documents));
  EXPECT_EQ(count_eos(ds.train), ds.train_documents);
  EXPECT_EQ(count_eos(ds.validation), ds.validation_documents);
  // Training holds the first documents, validation the last.
  const std::string first = Corpus(4).document(0), last = Corpus(4).document(documents - 1);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(ds.train.begin(), ds.train.begin() + first.size())),
            first);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(ds.validation.end() - last.size() - 1,
                                            ds.validation.end() - 1)),
            last);

  const TokenDataset again = load_dataset({"corpus", 4, 200000, 0.1}, tok);
  EXPECT_EQ(again.train, ds.train);
  EXPECT_EQ(again.validation, ds.validation);
  EXPECT_EQ(corpus_dataset(4, 1, 0.5, tok).validation_documents, 1);
  EXPECT_TRUE(corpus_dataset(4, 1000, 0.0, tok).validation.empty());
}

TEST(Dataset, TextFileSplitsByTailBytes) {
  testing::TempDir dir("k3_data");
  std::string text(1000, 'x');
  text.replace(900, 100, std::string(100, 'y'));
  const std::string path = dir.file("book.txt", text);
  ByteTokenizer tok;
  const TokenDataset ds = load_dataset({path, 0, 0, 0.1}, tok);
  ASSERT_EQ(ds.train.size(), 901u);
  ASSERT_EQ(ds.validation.size(), 101u);
  EXPECT_EQ(ds.train[899], 'x');
  EXPECT_EQ(ds.validation[0], 'y');
  EXPECT_EQ(ds.train.back(), tok.eos_id());
  EXPECT_EQ(ds.source, path);
}

TEST(Dataset, DirectorySplitsByFilesInNameOrder) {
  testing::TempDir dir("k3_data");
  dir.file("b.txt", "bbbb");
  dir.file("a.txt", "aa");
  dir.file("c.txt", "c");
  dir.file("notes.md", "ignored");
  fs::create_directories(fs::path(dir.path()) / "sub.txt");
  ByteTokenizer tok;
  const TokenDataset ds = text_directory_dataset(dir.path(), 0.34, tok);
  EXPECT_EQ(ds.train_documents, 2);
  EXPECT_EQ(ds.validation_documents, 1);
  EXPECT_EQ(tok.decode(ds.train), "aa<|eos|>bbbb<|eos|>");
  EXPECT_EQ(tok.decode(ds.validation), "c<|eos|>");
}

TEST(Dataset, BadSourcesNameThePath) {
  testing::TempDir dir("k3_data");
  ByteTokenizer tok;
  const std::string missing = dir.path() + "/missing.txt";
  Error e = error_from([&] { load_dataset({missing, 0, 0, 0.1}, tok); });
  EXPECT_EQ(e.context().file, missing);
  EXPECT_NE(e.message().find("no such file"), std::string::npos);

  const std::string empty = dir.file("empty.txt", "");
  e = error_from([&] { text_file_dataset(empty, 0.1, tok); });
  EXPECT_EQ(e.context().file, empty);
  EXPECT_NE(e.message().find("empty"), std::string::npos);

  const std::string no_text = dir.path() + "/no_text";
  fs::create_directories(no_text);
  e = error_from([&] { load_dataset({no_text, 0, 0, 0.1}, tok); });
  EXPECT_EQ(e.context().file, no_text);
  EXPECT_NE(e.message().find("no .txt files"), std::string::npos);

  e = error_from([&] { text_file_dataset(dir.file("one.txt", "x"), 0.1, tok); });
  EXPECT_NE(e.message().find("at least 2"), std::string::npos);
  e = error_from([&] { corpus_dataset(0, 1000, 1.0, tok); });
  EXPECT_EQ(e.context().field, "validation_fraction");
  e = error_from([&] { corpus_dataset(0, 0, 0.1, tok); });
  EXPECT_EQ(e.context().field, "corpus_tokens");
}

}  // namespace k3::data
