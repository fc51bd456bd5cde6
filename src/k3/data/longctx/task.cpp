#include "k3/data/longctx/task.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>

#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/data/longctx/pieces.h"

namespace k3::data {
namespace {

constexpr std::string_view kKindNames[] = {"multi_key", "variable_tracking", "aggregation"};

// A Fisher-Yates shuffle of [0, n) drawn one position at a time, storing only the entries it
// has moved: a task draws a few documents of a base of millions without a list of them all.
class PartialShuffle {
 public:
  explicit PartialShuffle(uint64_t n) : n_(n) {}
  uint64_t next(RandomDraws& draws) {
    const uint64_t j = k_ + draws.below(n_ - k_);
    const uint64_t picked = at(j);
    moved_[j] = at(k_);
    ++k_;
    return picked;
  }

 private:
  uint64_t at(uint64_t i) const {
    const auto it = moved_.find(i);
    return it == moved_.end() ? i : it->second;
  }
  uint64_t n_, k_ = 0;
  std::unordered_map<uint64_t, uint64_t> moved_;
};

// FILLER tokens of base documents in a random order (no document twice), separated by SEP, the
// last one cut.
std::vector<int32_t> draw_filler(const BaseDocuments& base, const std::vector<int32_t>& sep,
                                 int64_t filler, int64_t length, RandomDraws& draws) {
  const int64_t available = base.total_tokens() + base.size() * static_cast<int64_t>(sep.size());
  K3_CHECK_CTX(available >= filler, (ErrorContext{base.origin(), "base", -1}),
               "the base documents hold ", base.total_tokens(), " tokens, too few for a task of ",
               context_length_label(length), " tokens (its filler needs ", filler, ")");
  std::vector<int32_t> out;
  out.reserve(
      static_cast<size_t>(filler + base.total_tokens() / std::max<int64_t>(base.size(), 1)));
  PartialShuffle order(static_cast<uint64_t>(base.size()));
  while (static_cast<int64_t>(out.size()) < filler) {
    const int64_t doc = static_cast<int64_t>(order.next(draws));
    if (base.length(doc) == 0) continue;
    if (!out.empty()) out.insert(out.end(), sep.begin(), sep.end());
    const int64_t room = filler - static_cast<int64_t>(out.size());
    if (room > 0) base.append(doc, std::min(base.length(doc), room), out);
  }
  out.resize(static_cast<size_t>(filler));
  return out;
}

}  // namespace

std::string_view long_task_kind_name(LongTaskKind kind) {
  return kKindNames[static_cast<int>(kind)];
}

LongTaskKind parse_long_task_kind(std::string_view name) {
  for (int k = 0; k < kLongTaskKinds; ++k)
    if (kKindNames[k] == name) return static_cast<LongTaskKind>(k);
  throw Error("unknown long-context task kind '" + std::string(name) +
                  "', expected multi_key, variable_tracking or aggregation",
              ErrorContext{"", "kind", -1});
}

LongTask synthesize_long_task(const BaseDocuments& base, const Tokenizer& tokenizer,
                              const LongTaskSpec& spec) {
  RandomDraws draws(spec.seed, spec.stream);
  TaskText text = make_task_text(spec.kind, pieces_for_length(spec.length), spec.depth, draws);
  std::stable_sort(text.pieces.begin(), text.pieces.end(),
                   [](const TaskPiece& a, const TaskPiece& b) { return a.depth < b.depth; });
  std::vector<std::vector<int32_t>> pieces;
  int64_t used = 0;
  for (const TaskPiece& p : text.pieces) {
    pieces.push_back(tokenizer.encode(p.text));
    used += static_cast<int64_t>(pieces.back().size());
  }
  const std::vector<int32_t> question = tokenizer.encode(text.question);
  const std::vector<int32_t> answer = tokenizer.encode(text.answer);
  used += static_cast<int64_t>(question.size() + answer.size());
  // At least a quarter of the context is base text, so the pieces are scattered, not packed.
  const int64_t filler = spec.length - used;
  K3_CHECK_CTX(filler >= spec.length / 4, (ErrorContext{"", "lengths", -1}), "a length of ",
               spec.length, " tokens is too short for a ", long_task_kind_name(spec.kind),
               " task: its pieces, question and answer take ", used,
               " tokens, leaving less than a quarter for base text");
  const std::vector<int32_t> base_text =
      draw_filler(base, tokenizer.encode("\n\n"), filler, spec.length, draws);

  LongTask t;
  t.kind = spec.kind;
  t.tokens.reserve(static_cast<size_t>(spec.length));
  // A piece goes where its depth says in the whole context (base text and pieces), when the
  // pieces before it leave room.
  const double context = static_cast<double>(spec.length - question.size() - answer.size());
  int64_t taken = 0;  // base tokens placed so far
  int64_t first_needed = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t placed = t.length() - taken;  // piece tokens so far
    const int64_t at =
        std::clamp<int64_t>(std::llround(text.pieces[i].depth * context) - placed, taken, filler);
    t.tokens.insert(t.tokens.end(), base_text.begin() + taken, base_text.begin() + at);
    taken = at;
    if (text.pieces[i].needed && first_needed < 0) first_needed = t.length();
    t.tokens.insert(t.tokens.end(), pieces[i].begin(), pieces[i].end());
  }
  t.tokens.insert(t.tokens.end(), base_text.begin() + taken, base_text.end());
  t.question_offset = t.length();
  t.depth = static_cast<double>(first_needed) / static_cast<double>(t.question_offset);
  t.tokens.insert(t.tokens.end(), question.begin(), question.end());
  t.answer_offset = t.length();
  t.answer_length = static_cast<int64_t>(answer.size());
  t.tokens.insert(t.tokens.end(), answer.begin(), answer.end());
  t.answer = text.answer;
  return t;
}

std::vector<LongTask> synthesize_long_tasks(const BaseDocuments& base, const Tokenizer& tokenizer,
                                            std::span<const int64_t> lengths, int64_t per_length,
                                            uint64_t seed) {
  std::vector<LongTask> tasks;
  for (int64_t length : lengths)
    for (int64_t i = 0; i < per_length; ++i) {
      const int64_t kind = i % kLongTaskKinds;
      const int64_t of_kind = (per_length - kind + kLongTaskKinds - 1) / kLongTaskKinds;
      LongTaskSpec spec;
      spec.kind = static_cast<LongTaskKind>(kind);
      spec.length = length;
      spec.seed = seed;
      spec.stream = (static_cast<uint64_t>(length) << 32) | static_cast<uint64_t>(i);
      const double u = philox_uniform(seed, stream_of("longctx.depth"), spec.stream);
      spec.depth = (static_cast<double>(i / kLongTaskKinds) + u) / static_cast<double>(of_kind);
      tasks.push_back(synthesize_long_task(base, tokenizer, spec));
    }
  return tasks;
}

int64_t parse_context_length(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string_view unit = text.substr(digits);
  const int64_t scale = unit.empty()                 ? 1
                        : unit == "K" || unit == "k" ? 1024
                        : unit == "M" || unit == "m" ? 1024 * 1024
                                                     : 0;
  K3_CHECK_CTX(digits > 0 && digits <= 6 && scale > 0, (ErrorContext{"", "lengths", -1}), "'", text,
               "' is not a length: expected a count of tokens such as 512, 4K or 1M");
  const int64_t n = std::stoll(std::string(text.substr(0, digits))) * scale;
  K3_CHECK_CTX(n > 0, (ErrorContext{"", "lengths", -1}), "a length must be positive, not '", text,
               "'");
  return n;
}

std::string context_length_label(int64_t tokens) {
  if (tokens >= 1024 * 1024 && tokens % (1024 * 1024) == 0)
    return std::to_string(tokens / (1024 * 1024)) + "M";
  if (tokens >= 1024 && tokens % 1024 == 0) return std::to_string(tokens / 1024) + "K";
  return std::to_string(tokens);
}

std::vector<int64_t> parse_context_lengths(std::string_view list) {
  std::vector<int64_t> out;
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    const int64_t n = parse_context_length(list.substr(start, comma - start));
    K3_CHECK_CTX(std::find(out.begin(), out.end(), n) == out.end(),
                 (ErrorContext{"", "lengths", -1}), "length ", context_length_label(n),
                 " is listed twice");
    out.push_back(n);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

}  // namespace k3::data
