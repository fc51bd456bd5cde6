// `k3lab tokenizer train|encode|decode`: train a byte-level BPE tokenizer directory, and encode
// stdin to ids or decode ids back to bytes with any tokenizer (docs/data.md, Tokenizer).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "k3/apps/commands.h"
#include "k3/base/error.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/tokenizer/bpe_stream.h"
#include "k3/data/tokenizer/bpe_train.h"

namespace k3::apps {
namespace {

void print_ids(const std::vector<int32_t>& ids, bool& first) {
  std::string line;
  for (int32_t id : ids) {
    if (!first) line += ' ';
    line += std::to_string(id);
    first = false;
  }
  std::fwrite(line.data(), 1, line.size(), stdout);
}

// stdin, chunk by chunk, to one line of ids. A BPE tokenizer encodes as the bytes arrive.
void encode_stdin(const std::string& spec) {
  const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(spec);
  const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(tokenizer.get());
  std::unique_ptr<data::BpeStreamEncoder> stream;
  if (bpe) stream = std::make_unique<data::BpeStreamEncoder>(*bpe);
  std::vector<char> chunk(1 << 20);
  std::vector<int32_t> ids;
  bool first = true;
  while (const size_t n = std::fread(chunk.data(), 1, chunk.size(), stdin)) {
    ids.clear();
    if (stream) {
      stream->feed(std::string_view(chunk.data(), n), ids);
    } else {
      ids = tokenizer->encode(std::string_view(chunk.data(), n));  // the byte tokenizer: per byte
    }
    print_ids(ids, first);
  }
  K3_CHECK(!std::ferror(stdin), "tokenizer encode: reading stdin failed");
  ids.clear();
  if (stream) stream->finish(ids);
  print_ids(ids, first);
  std::fputc('\n', stdout);
}

// Whitespace-separated ids on stdin to the bytes they decode to.
void decode_stdin(const std::string& spec) {
  const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(spec);
  std::vector<int32_t> ids;
  long long id = 0;
  int got = 0;
  while ((got = std::scanf("%lld", &id)) == 1) {
    K3_CHECK(id >= INT32_MIN && id <= INT32_MAX, "tokenizer decode: id ", id,
             " on stdin is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  K3_CHECK(got == EOF, "tokenizer decode: stdin holds something other than ids after ", ids.size(),
           " ids");
  const std::string text = tokenizer->decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void add_tokenizer(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Train a BPE tokenizer; encode and decode text");
  cmd->require_subcommand(1);

  struct TrainArgs {
    std::vector<std::string> inputs;
    int32_t vocab_size = 32768;
    int64_t min_pair_count = 2;
    std::string out;
  };
  auto t = std::make_shared<TrainArgs>();
  auto* train = cmd->add_subcommand(
      "train", "Train a byte-level BPE vocabulary and write it as a tokenizer directory");
  train->add_option("--input", t->inputs, "Text files to train on")->required()->expected(1, -1);
  train
      ->add_option("--vocab-size", t->vocab_size,
                   "Ids in all: the 256 bytes, the merges, and [BOS], [EOS], [PAD]")
      ->capture_default_str();
  train
      ->add_option("--min-pair-count", t->min_pair_count,
                   "Stop when the most frequent pair occurs fewer times")
      ->capture_default_str();
  train
      ->add_option("--out", t->out,
                   "The directory to write (tiktoken.model, tokenizer_config.json)")
      ->required();
  train->callback([t] {
    data::BpeTrainOptions options;
    options.min_pair_count = t->min_pair_count;
    const data::BpeTrainSummary s = data::train_bpe(t->inputs, t->vocab_size, t->out, options);
    std::printf(
        "trained on %lld bytes (%lld pieces, %lld distinct): %lld merges, %d ids in %.2f s, "
        "written to %s\n",
        static_cast<long long>(s.input_bytes), static_cast<long long>(s.pieces),
        static_cast<long long>(s.distinct_pieces), static_cast<long long>(s.merges), s.vocab_size,
        s.seconds, t->out.c_str());
    if (s.stopped_early && t->min_pair_count <= 1) {
      std::printf("stopped early at %d of the %d ids asked for: every piece is one token\n",
                  s.vocab_size, t->vocab_size);
    } else if (s.stopped_early) {
      std::printf(
          "stopped early at %d of the %d ids asked for: no pair of tokens occurs %lld "
          "times or more\n",
          s.vocab_size, t->vocab_size, static_cast<long long>(t->min_pair_count));
    }
  });

  auto spec = std::make_shared<std::string>();
  auto* encode = cmd->add_subcommand("encode", "Encode stdin to ids, printed on one line");
  encode->add_option("--tokenizer", *spec, "\"byte\" or a tokenizer directory")->required();
  encode->callback([spec] { encode_stdin(*spec); });
  auto* decode = cmd->add_subcommand("decode", "Decode whitespace-separated ids on stdin to text");
  decode->add_option("--tokenizer", *spec, "\"byte\" or a tokenizer directory")->required();
  decode->callback([spec] { decode_stdin(*spec); });
}

}  // namespace k3::apps
