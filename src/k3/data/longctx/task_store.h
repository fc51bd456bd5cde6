// Long-context tasks on disk, readable by runs: DIR is a shard directory (shards/shard_set.h)
// whose train split holds the task documents in order, each followed by eos as every document
// is, and DIR/tasks.jsonl says what each document asks, one line per task:
//   {"document": 0, "kind": "multi_key", "length": 4096, "question_offset": 3990,
//    "answer_offset": 4061, "answer_length": 35, "depth": 0.4213, "answer": " 583021, ..."}
// Offsets count tokens from the document's first token.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "k3/data/longctx/task.h"
#include "k3/data/tokenizer.h"

namespace k3::data {

inline constexpr const char* kLongTasksFile = "tasks.jsonl";

// DIR must not exist yet. SOURCE goes into the shard manifest: what the tasks were made from.
void write_long_tasks(const std::string& dir, std::span<const LongTask> tasks,
                      const Tokenizer& tokenizer, const nlohmann::json& source);

// The tasks of DIR; a one-line k3::Error naming the file (and line of tasks.jsonl) when the
// shards or a task line are malformed or disagree (a span outside its document, say).
std::vector<LongTask> read_long_tasks(const std::string& dir, const Tokenizer& tokenizer);

}  // namespace k3::data
