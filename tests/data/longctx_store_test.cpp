#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "k3/base/fs.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/corpus.h"
#include "k3/data/longctx/task_store.h"
#include "k3/data/shards/shard_writer.h"

namespace k3::data {
namespace {

using testing::error_of;
using testing::TempDir;

TEST(LongCtxStore, TasksRoundTripThroughShards) {
  ByteTokenizer tok;
  TempDir tmp("k3_longctx");
  // Base documents written as shards and read back as they were.
  Corpus corpus(3);
  std::vector<std::vector<int32_t>> docs;
  for (int64_t i = 0; i < 150; ++i) docs.push_back(tok.encode(corpus.document(i)));
  {
    shards::ShardDirectoryWriter w(tmp.path() + "/base", tok, /*shard_tokens=*/20000);
    for (const auto& doc : docs) w.add(shards::Split::train, doc);
    w.add(shards::Split::validation, tok.encode("held out"));
    w.finish();
  }
  // Read in place (over several shard files): the train split's documents, without their eos.
  const BaseDocuments base = BaseDocuments::from_shards(tmp.path() + "/base", tok);
  ASSERT_EQ(base.size(), 150);
  int64_t total = 0;
  for (int64_t i = 0; i < base.size(); ++i) {
    EXPECT_EQ(base.document(i), docs[static_cast<size_t>(i)]) << i;
    total += static_cast<int64_t>(docs[static_cast<size_t>(i)].size());
  }
  EXPECT_EQ(base.total_tokens(), total);
  EXPECT_GT(std::filesystem::directory_entry(tmp.path() + "/base/train-00001.k3shard").exists(), 0)
      << "the base spans several shards";
  // Tasks from the mapped base are the tasks from the same documents in memory.
  EXPECT_EQ(
      synthesize_long_tasks(base, tok, std::vector<int64_t>{2048}, 3, 5)[2].tokens,
      synthesize_long_tasks(BaseDocuments(docs), tok, std::vector<int64_t>{2048}, 3, 5)[2].tokens);

  const auto tasks = synthesize_long_tasks(base, tok, std::vector<int64_t>{1024, 2048}, 4, 1);
  const std::string dir = tmp.path() + "/tasks";
  write_long_tasks(dir, tasks, tok, {{"test", true}});
  const auto back = read_long_tasks(dir, tok);
  ASSERT_EQ(back.size(), tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ(back[i].tokens, tasks[i].tokens);
    EXPECT_EQ(back[i].kind, tasks[i].kind);
    EXPECT_EQ(back[i].question_offset, tasks[i].question_offset);
    EXPECT_EQ(back[i].answer_offset, tasks[i].answer_offset);
    EXPECT_EQ(back[i].answer_length, tasks[i].answer_length);
    EXPECT_EQ(back[i].depth, tasks[i].depth);
    EXPECT_EQ(back[i].answer, tasks[i].answer);
  }
  // A run reads the same directory as training data: one document per task, each ended by eos.
  EXPECT_NE(error_of([&] { write_long_tasks(dir, tasks, tok, {}); }), "") << "DIR exists";

  // A task line that disagrees with its document is refused naming the file and line.
  const std::string lines = read_file(dir + "/tasks.jsonl");
  const size_t second = lines.find('\n') + 1;
  std::string bad = lines;
  bad.replace(bad.find("\"length\":", second), 14, "\"length\":1000,");
  write_file_atomic(dir + "/tasks.jsonl", bad);
  EXPECT_NE(error_of([&] { read_long_tasks(dir, tok); }).find("tasks.jsonl:2: length 1000"),
            std::string::npos)
      << error_of([&] { read_long_tasks(dir, tok); });
  write_file_atomic(dir + "/tasks.jsonl", lines.substr(0, second) + "{\"document\": 1}\n");
  EXPECT_NE(error_of([&] { read_long_tasks(dir, tok); }).find("tasks.jsonl:2: malformed"),
            std::string::npos);
  EXPECT_NE(error_of([&] { BaseDocuments::from_shards(tmp.path() + "/missing", tok); }), "");
}

}  // namespace
}  // namespace k3::data
