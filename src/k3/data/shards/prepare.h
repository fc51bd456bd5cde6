// `k3lab data prepare`: text inputs tokenized, mixed and written as a shard directory.
//
// The mix. Input i with weight w_i (> 0) is read as an endless loop over its documents until
// w_i x its size in bytes have been consumed: weight 1 reads it once, 3 three times, 0.5 its first
// half (the document that crosses the half included). Its share of the mixed stream is therefore
// w_i x its tokens. The inputs are interleaved by progress: the next document always comes from
// the unfinished input that has consumed the smallest fraction of its w_i x size (the first such
// input on ties), so every input is spread evenly along the stream and all end together. Nothing
// is random: the same inputs and weights give the same shards.
//
// The split. Per input, with F = its val_fraction in millionths (rounded), document j (counted from
// 0 within one pass over the input) goes to validation when ceil((j+1) F / 10^6) > ceil(j F /
// 10^6): documents 0, 1/f, 2/f, ... so ceil(n f) of the first n. A repeated document lands in
// the same split every time, so validation never holds a training document of the same input.
// A fraction of 1 sends every document of its input to validation: a split made beforehand is
// kept as is by giving the training documents 0 and the validation documents 1.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "k3/data/shards/shard_writer.h"
#include "k3/data/tokenizer.h"

namespace k3::data::shards {

struct PrepareSpec {
  std::vector<std::string> inputs;  // .txt / .jsonl files or directories of them
  std::vector<double> weights;      // one per input, or empty for all 1
  std::string out;                  // the shard directory to create
  std::vector<double> val_fractions{0.05};  // in [0, 1]: one per input, or one for all
  int64_t shard_tokens = kDefaultShardTokens;
};

struct PrepareProgress {
  uint64_t bytes_read = 0;   // over all inputs and passes
  uint64_t bytes_total = 0;  // what the weights will read in all (about: whole documents)
  int64_t tokens = 0;        // written, eos included
  int64_t documents = 0;
  bool finished = false;  // the last call
};

struct InputSummary {
  std::string path;
  double weight = 1;
  uint64_t bytes = 0;  // its size
  SplitCounts train, validation;
};

struct PrepareSummary {
  SplitCounts train, validation;
  std::vector<InputSummary> inputs;
};

// Whether document J of an input goes to validation under FRACTION (see above).
bool is_validation_document(int64_t j, double fraction);

// Errors are one-line k3::Errors naming the input, the field (weights, val_fraction,
// shard_tokens) or the output directory. PROGRESS, when set, is called every few megabytes.
PrepareSummary prepare_shards(const PrepareSpec& spec, const Tokenizer& tokenizer,
                              const std::function<void(const PrepareProgress&)>& progress = {});

}  // namespace k3::data::shards
