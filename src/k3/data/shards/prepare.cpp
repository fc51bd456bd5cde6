#include "k3/data/shards/prepare.h"

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/data/shards/input_documents.h"

namespace k3::data::shards {

namespace {

constexpr int64_t kMillion = 1'000'000;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One input of the mix and how far it has got.
struct MixInput {
  std::unique_ptr<InputDocuments> docs;
  double val_fraction = 0;  // of its documents, held out
  double goal = 0;          // bytes to consume: weight x size
  uint64_t consumed = 0;    // bytes, over all passes
  int64_t index = 0;        // of the next document within the pass
  bool pass_had_documents = false;
  InputSummary summary;

  bool done() const { return static_cast<double>(consumed) >= goal; }
  double progress() const { return static_cast<double>(consumed) / goal; }
};

void check_spec(const PrepareSpec& spec) {
  K3_CHECK_CTX(!spec.inputs.empty(), (ErrorContext{"", "input", -1}), "no input given");
  K3_CHECK_CTX(spec.weights.empty() || spec.weights.size() == spec.inputs.size(),
               (ErrorContext{"", "weights", -1}), spec.weights.size(), " weights for ",
               spec.inputs.size(), " inputs: give one per input, or none");
  for (double w : spec.weights)
    K3_CHECK_CTX(std::isfinite(w) && w > 0, (ErrorContext{"", "weights", -1}),
                 "expected weights > 0, got ", w);
  K3_CHECK_CTX(spec.val_fractions.size() == 1 || spec.val_fractions.size() == spec.inputs.size(),
               (ErrorContext{"", "val_fraction", -1}), spec.val_fractions.size(),
               " validation fractions for ", spec.inputs.size(),
               " inputs: give one for all, or one per input");
  for (double f : spec.val_fractions)
    K3_CHECK_CTX(f >= 0 && f <= 1, (ErrorContext{"", "val_fraction", -1}),
                 "expected a fraction in [0, 1], got ", f);
  K3_CHECK_CTX(spec.shard_tokens >= 1, (ErrorContext{"", "shard_tokens", -1}),
               "expected at least 1 token per shard, got ", spec.shard_tokens);
}

}  // namespace

bool is_validation_document(int64_t j, double fraction) {
  const int64_t f = std::llround(fraction * kMillion);
  return ceil_div((j + 1) * f, kMillion) > ceil_div(j * f, kMillion);
}

PrepareSummary prepare_shards(const PrepareSpec& spec, const Tokenizer& tokenizer,
                              const std::function<void(const PrepareProgress&)>& progress) {
  check_spec(spec);
  std::vector<MixInput> mix(spec.inputs.size());
  PrepareProgress p;
  for (size_t i = 0; i < mix.size(); ++i) {
    MixInput& in = mix[i];
    in.docs = std::make_unique<InputDocuments>(spec.inputs[i]);
    in.summary.path = spec.inputs[i];
    in.summary.weight = spec.weights.empty() ? 1.0 : spec.weights[i];
    in.summary.bytes = in.docs->total_bytes();
    K3_CHECK_CTX(in.summary.bytes > 0, (ErrorContext{spec.inputs[i], "", -1}), "empty input");
    in.val_fraction = spec.val_fractions[spec.val_fractions.size() == 1 ? 0 : i];
    in.goal = in.summary.weight * static_cast<double>(in.summary.bytes);
    p.bytes_total += static_cast<uint64_t>(in.goal);
  }
  ShardDirectoryWriter writer(spec.out, tokenizer, spec.shard_tokens);
  std::string text;
  uint64_t reported = 0;
  for (;;) {
    MixInput* next = nullptr;
    for (MixInput& in : mix)
      if (!in.done() && (!next || in.progress() < next->progress())) next = &in;
    if (!next) break;
    InputDocuments& docs = *next->docs;
    const uint64_t before = docs.bytes_read();
    if (!docs.next(text)) {  // the end of a pass: another one for a weight above 1
      K3_CHECK_CTX(next->pass_had_documents, (ErrorContext{docs.path(), "", -1}),
                   "no documents in the input");
      next->consumed += docs.bytes_read() - before;
      p.bytes_read += docs.bytes_read() - before;
      docs.rewind();
      next->index = 0;
      next->pass_had_documents = false;
      continue;
    }
    next->pass_had_documents = true;
    next->consumed += docs.bytes_read() - before;
    p.bytes_read += docs.bytes_read() - before;
    const Split split = is_validation_document(next->index++, next->val_fraction)
                            ? Split::validation
                            : Split::train;
    const std::vector<int32_t> ids = tokenizer.encode(text);
    writer.add(split, ids);
    SplitCounts& c = split == Split::train ? next->summary.train : next->summary.validation;
    c.tokens += static_cast<int64_t>(ids.size()) + 1;
    c.documents += 1;
    p.tokens += static_cast<int64_t>(ids.size()) + 1;
    p.documents += 1;
    if (progress && p.bytes_read - reported >= (uint64_t{4} << 20)) {
      reported = p.bytes_read;
      progress(p);
    }
  }
  PrepareSummary summary{writer.counts(Split::train), writer.counts(Split::validation), {}};
  nlohmann::json inputs = nlohmann::json::array();
  for (MixInput& in : mix) {
    const InputSummary& s = in.summary;
    inputs.push_back(
        {{"path", s.path},
         {"weight", s.weight},
         {"val_fraction", in.val_fraction},
         {"bytes", s.bytes},
         {"train", {{"tokens", s.train.tokens}, {"documents", s.train.documents}}},
         {"validation", {{"tokens", s.validation.tokens}, {"documents", s.validation.documents}}}});
    summary.inputs.push_back(s);
  }
  writer.finish({{"inputs", inputs}, {"shard_tokens", spec.shard_tokens}});
  p.finished = true;
  if (progress) progress(p);
  return summary;
}

}  // namespace k3::data::shards
