#include "k3/data/longctx/task_store.h"

#include <cmath>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/data/shards/shard_set.h"
#include "k3/data/shards/shard_writer.h"

namespace k3::data {
namespace {

// The train split's documents (eos-separated) as spans of TOKENS.
std::vector<std::span<const int32_t>> split_documents(const std::vector<int32_t>& tokens,
                                                      int32_t eos) {
  std::vector<std::span<const int32_t>> docs;
  size_t start = 0;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == eos) {
      docs.emplace_back(tokens.data() + start, i - start);
      start = i + 1;
    }
  return docs;
}

std::string task_line(const LongTask& t, size_t document) {
  return nlohmann::json{{"document", document},
                        {"kind", long_task_kind_name(t.kind)},
                        {"length", t.length()},
                        {"question_offset", t.question_offset},
                        {"answer_offset", t.answer_offset},
                        {"answer_length", t.answer_length},
                        {"depth", t.depth},
                        {"answer", t.answer}}
             .dump() +
         "\n";
}

}  // namespace

void write_long_tasks(const std::string& dir, std::span<const LongTask> tasks,
                      const Tokenizer& tokenizer, const nlohmann::json& source) {
  shards::ShardDirectoryWriter writer(dir, tokenizer);
  std::string lines;
  for (size_t i = 0; i < tasks.size(); ++i) {
    writer.add(shards::Split::train, tasks[i].tokens);
    lines += task_line(tasks[i], i);
  }
  writer.finish(source);
  write_file_atomic(dir + "/" + kLongTasksFile, lines);
}

std::vector<LongTask> read_long_tasks(const std::string& dir, const Tokenizer& tokenizer) {
  const shards::ShardSet set(dir, tokenizer);
  const std::vector<int32_t> tokens = set.train().to_vector();
  const auto docs = split_documents(tokens, tokenizer.eos_id());
  const std::string path = dir + "/" + kLongTasksFile;
  const std::string text = read_file(path);
  std::vector<LongTask> tasks;
  int64_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    const ErrorContext at{path + ":" + std::to_string(line_number), "", -1};
    nlohmann::json j;
    LongTask t;
    size_t document = 0;
    try {
      j = nlohmann::json::parse(line);
      document = j.at("document").get<size_t>();
      t.kind = parse_long_task_kind(j.at("kind").get<std::string>());
      t.question_offset = j.at("question_offset").get<int64_t>();
      t.answer_offset = j.at("answer_offset").get<int64_t>();
      t.answer_length = j.at("answer_length").get<int64_t>();
      t.depth = j.at("depth").get<double>();
      t.answer = j.at("answer").get<std::string>();
      K3_CHECK(document < docs.size(), "document ", document, " is not in the shards (",
               docs.size(), " documents)");
      t.tokens.assign(docs[document].begin(), docs[document].end());
      K3_CHECK(j.at("length").get<int64_t>() == t.length(), "length ", j.at("length"),
               " but document ", document, " holds ", t.length(), " tokens");
      K3_CHECK(0 < t.question_offset && t.question_offset <= t.answer_offset &&
                   t.answer_length > 0 && t.answer_offset + t.answer_length <= t.length(),
               "the question and answer spans do not fit in the document's ", t.length(),
               " tokens");
      K3_CHECK(t.depth >= 0 && t.depth <= 1, "depth ", t.depth, " is not in [0, 1]");
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("malformed task line: ") + e.what(), at);
    } catch (const Error& e) {
      throw Error(e.message(), at);
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace k3::data
