// `k3lab data prepare --input PATH... --tokenizer SPEC --out DIR [--weights W...]
// [--val-fraction F] [--shard-tokens N]`: text tokenized into a shard directory for
// data.source = "shards" (docs/data.md). `k3lab data longctx` lives in data_longctx.cpp.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/stop_signals.h"
#include "k3/data/shards/prepare.h"
#include "k3/data/tokenizer.h"

namespace k3::apps {

namespace {

// A live line on stderr: rewritten in place on a terminal (at most 4 times a second), else one
// line every 10 seconds.
class PrepareProgressLine {
 public:
  PrepareProgressLine() : tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(const data::shards::PrepareProgress& p, bool last) {
    const double seconds = elapsed();
    if (!last && seconds - shown_ < (tty_ ? 0.25 : 10.0)) return;
    shown_ = seconds;
    const double mb = static_cast<double>(p.bytes_read) / 1e6;
    const std::string line =
        strprintf("read %.1f of %.1f MB (%.0f%%), %.1f MB/s, %lld documents, %lld tokens", mb,
                  static_cast<double>(p.bytes_total) / 1e6,
                  p.bytes_total ? 100.0 * static_cast<double>(p.bytes_read) / p.bytes_total : 100.0,
                  seconds > 0 ? mb / seconds : 0.0, static_cast<long long>(p.documents),
                  static_cast<long long>(p.tokens));
    std::fprintf(stderr, tty_ ? "\r%s\033[K%s" : "%s%s", line.c_str(), tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double shown_ = 0;
};

void add_prepare(CLI::App* data) {
  struct Args {
    data::shards::PrepareSpec spec;
    std::string tokenizer;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = data->add_subcommand("prepare", "Tokenize text into a shard directory");
  cmd->add_option("--input", a->spec.inputs,
                  ".txt files (documents separated by blank lines), .jsonl files (a \"text\" per "
                  "line) or directories of them")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer, "\"byte\" or a tokenizer directory")->required();
  cmd->add_option("--out", a->spec.out, "The shard directory to create (must not exist)")
      ->required();
  cmd->add_option("--weights", a->spec.weights,
                  "Per input: how many times it is read (1.5: once, then its first half)");
  cmd->add_option("--val-fraction", a->spec.val_fractions,
                  "Share of each input's documents held out for validation: one for all, or one "
                  "per input (1: the whole input is validation)")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", a->spec.shard_tokens, "Tokens per shard file (about)")
      ->capture_default_str();
  cmd->add_flag("--quiet", a->quiet, "No progress line");
  cmd->callback([a] {
    const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(a->tokenizer);
    PrepareProgressLine line;
    const StopSignals stop;  // Ctrl-C: the half-written directory is removed on the way out
    auto show = [&](const data::shards::PrepareProgress& p) {
      if (const int signal = stop.requested())
        throw Error(std::string("interrupted by ") + signal_name(signal) + ": " + a->spec.out +
                    " not written");
      if (!a->quiet) line.update(p, p.finished);
    };
    const data::shards::PrepareSummary s = data::shards::prepare_shards(a->spec, *tokenizer, show);
    for (const data::shards::InputSummary& in : s.inputs)
      std::printf("%s (weight %g): %lld + %lld documents, %lld + %lld tokens\n", in.path.c_str(),
                  in.weight, static_cast<long long>(in.train.documents),
                  static_cast<long long>(in.validation.documents),
                  static_cast<long long>(in.train.tokens),
                  static_cast<long long>(in.validation.tokens));
    std::printf(
        "wrote %s: train %lld documents, %lld tokens; validation %lld documents, %lld "
        "tokens (%s tokenizer) in %.1f s\n",
        a->spec.out.c_str(), static_cast<long long>(s.train.documents),
        static_cast<long long>(s.train.tokens), static_cast<long long>(s.validation.documents),
        static_cast<long long>(s.validation.tokens), tokenizer->name().c_str(), line.elapsed());
  });
}

}  // namespace

void add_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Prepare training data");
  cmd->require_subcommand(1);
  add_prepare(cmd);
  add_data_longctx(*cmd);
}

}  // namespace k3::apps
