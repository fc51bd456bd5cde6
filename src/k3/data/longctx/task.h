// Long-context task documents: pieces of a task (needles) scattered among permuted base documents,
// then a question whose answer needs every piece it names, so that no part of the context is
// enough on its own. Three kinds:
//   multi-key retrieval  "The value of key qhzd-wmke is 583021." ...  values of four keys?
//   variable tracking    "VAR KQZTB = 48120." ... "VAR PLMRA = KQZTB." ...  a chain's end?
//   aggregation          "Crate WQPZ holds 7 apples." ...  apples in all the crates?
// A document is CONTEXT QUESTION ANSWER, exactly `length` tokens; only the answer span is scored.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "k3/data/longctx/base_documents.h"
#include "k3/data/tokenizer.h"

namespace k3::data {

enum class LongTaskKind { kMultiKey, kVariableTracking, kAggregation };
inline constexpr int kLongTaskKinds = 3;

std::string_view long_task_kind_name(LongTaskKind kind);  // "multi_key", "variable_tracking", ...
// The kind of a name; throws a k3::Error (field "kind") for any other name.
LongTaskKind parse_long_task_kind(std::string_view name);

struct LongTask {
  LongTaskKind kind = LongTaskKind::kMultiKey;
  std::vector<int32_t> tokens;  // the whole document: context, question, answer
  int64_t question_offset = 0;  // where the context ends and the question begins
  int64_t answer_offset = 0;    // the answer span: tokens [answer_offset, answer_offset + length)
  int64_t answer_length = 0;
  // Where the answer's deepest piece starts, relative to the context: the piece's first token
  // offset divided by the context's length, in [0, 1). 0 is the start of the document; of the
  // pieces the answer needs, the one nearest the start (the farthest from the question) counts.
  double depth = 0;
  std::string answer;  // the answer span's text (with its leading space)

  int64_t length() const { return static_cast<int64_t>(tokens.size()); }
};

struct LongTaskSpec {
  LongTaskKind kind = LongTaskKind::kMultiKey;
  int64_t length = 0;  // the document's length in tokens
  double depth = 0;    // where the answer's deepest piece goes, in [0, 1]
  uint64_t seed = 0;
  uint64_t stream = 0;  // the Philox stream of this task's draws
};

// One task document, a function of (base, tokenizer, spec) only. Throws a k3::Error when the
// length leaves too little room for the base documents between the pieces, or when the base
// documents hold too few tokens to fill it.
LongTask synthesize_long_task(const BaseDocuments& base, const Tokenizer& tokenizer,
                              const LongTaskSpec& spec);

// per_length tasks of each length: kinds in turn, and within a kind depths spread evenly over
// [0, 1] (one random depth in each of its equal strata). Task i of length L draws from its own
// stream, so each task can be made alone and the set does not depend on the other lengths.
std::vector<LongTask> synthesize_long_tasks(const BaseDocuments& base, const Tokenizer& tokenizer,
                                            std::span<const int64_t> lengths, int64_t per_length,
                                            uint64_t seed);

// "512", "4K" (4096), "16K", "1M" (1048576): a count of tokens. Throws a k3::Error (field
// "lengths") for anything else.
int64_t parse_context_length(std::string_view text);
std::string context_length_label(int64_t tokens);  // 4096 -> "4K", 1000 -> "1000"
// A comma-separated list of distinct lengths, e.g. "1K,4K,16K".
std::vector<int64_t> parse_context_lengths(std::string_view list);

}  // namespace k3::data
