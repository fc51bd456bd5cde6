// Byte-level BPE throughput on one thread: training time, then encode (whole text, streamed in
// 64 KiB chunks, and without the cache of merged pieces), the pre-tokenizer alone, and decode, in
// MB/s of text (docs/data.md).
//
//   bench_tokenizer_throughput [--text PATH] [--vocab-size 32768] [--copies 16] [--reps 5]
//                              [--tokenizer DIR]
//
// Trains a vocabulary on the first half of --text (default: tinyshakespeare in ../shared/data
// beside the source tree) and encodes the other half, repeated --copies times, so that the words
// it meets are not all tokens. Half of tinyshakespeare holds no pair twice beyond about 10K ids:
// the rank table is then filled up to --vocab-size with random 8-12 letter tokens, which the text
// does not contain, so that lookups pay for a table of that size. --tokenizer DIR: that
// tokenizer as it is, on the whole text.
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/fs.h"
#include "k3/base/timer.h"
#include "k3/data/tokenizer/bpe_stream.h"
#include "k3/data/tokenizer/bpe_train.h"
#include "spread.h"

namespace {

using k3::bench::spread;
using k3::bench::spread_text;

template <typename F>
std::string rate(int reps, double bytes, F&& run) {
  std::vector<double> mbs;
  for (int r = 0; r < reps; ++r) {
    const k3::Timer timer;
    run();
    mbs.push_back(bytes / timer.seconds() / 1e6);
  }
  return spread_text(spread(mbs), "%.1f");
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = k3::bench::parse_flags(
      argc, argv, {"--text", "--vocab-size", "--copies", "--reps", "--tokenizer"});
  auto flag = [&](const std::string& name, const std::string& fallback) {
    return flags.count(name) ? flags.at(name) : fallback;
  };
  const std::string text_path =
      flag("--text", std::string(K3_BENCH_DIR) + "/../../shared/data/tinyshakespeare.txt");
  const int vocab_size = std::stoi(flag("--vocab-size", "32768"));
  const int copies = std::stoi(flag("--copies", "16"));
  const int reps = std::stoi(flag("--reps", "5"));
  std::string dir = flag("--tokenizer", "");
  const bool train = dir.empty();

  std::string one = k3::read_file(text_path);
  if (train) {
    const std::filesystem::path tmp =
        std::filesystem::temp_directory_path() / "bench_tokenizer_throughput";
    std::filesystem::create_directories(tmp);
    const size_t half = one.find('\n', one.size() / 2) + 1;
    k3::write_file_atomic((tmp / "train.txt").string(), one.substr(0, half));
    one.erase(0, half);
    dir = (tmp / "tokenizer").string();
    const k3::data::BpeTrainSummary s =
        k3::data::train_bpe({(tmp / "train.txt").string()}, vocab_size, dir);
    std::printf("trained on the first %.2f MB of %s: %d ids (%lld merges%s) in %.2f s\n",
                s.input_bytes / 1e6, text_path.c_str(), s.vocab_size,
                static_cast<long long>(s.merges),
                s.stopped_early ? ", stopped early: no pair occurs often enough" : "", s.seconds);
  }
  k3::data::BpeFiles files = k3::data::read_bpe_files(dir);
  if (train) {
    std::set<std::string> tokens(files.tokens.begin(), files.tokens.end());
    std::mt19937_64 rng(1);
    const auto want = static_cast<size_t>(vocab_size) - files.specials.size();
    while (files.tokens.size() < want) {
      std::string t(8 + rng() % 5, ' ');
      for (char& c : t) c = static_cast<char>('a' + rng() % 26);
      if (one.find(t) == std::string::npos && tokens.insert(t).second) files.tokens.push_back(t);
    }
    const auto base = static_cast<int32_t>(files.tokens.size());
    files.bos_id = base;
    files.eos_id = base + 1;
    files.pad_id = base + 2;
  }
  const k3::data::BpeTokenizer tok(files, dir);
  std::string text;
  for (int c = 0; c < copies; ++c) text += one;
  const double bytes = static_cast<double>(text.size());
  std::vector<int32_t> ids = tok.encode(text);
  std::printf("vocabulary %d ids; encoding %.2f MB (%d copies): %zu tokens, %.2f bytes a token\n",
              tok.vocab_size(), bytes / 1e6, copies, ids.size(), bytes / ids.size());

  std::printf("MB/s on one thread, median [min-max] of %d:\n", reps);
  std::printf("  encode               %s\n",
              rate(reps, bytes, [&] { ids = tok.encode(text); }).c_str());
  std::printf("  encode, streamed     %s\n", rate(reps, bytes, [&] {
                                               k3::data::BpeStreamEncoder stream(tok);
                                               ids.clear();
                                               for (size_t at = 0; at < text.size(); at += 65536) {
                                                 stream.feed(
                                                     std::string_view(text).substr(at, 65536), ids);
                                               }
                                               stream.finish(ids);
                                             }).c_str());
  std::vector<size_t> ends;
  std::printf("  encode, no cache     %s\n",
              rate(reps, bytes, [&] {
                k3::data::RankTable::Scratch scratch;
                scratch.cache_merges = false;
                ends.clear();
                ids.clear();
                tok.pretokenizer().split(text, true, ends);
                size_t begin = 0;
                for (size_t end : ends) {
                  tok.ranks().encode_piece(std::string_view(text).substr(begin, end - begin), ids,
                                           scratch);
                  begin = end;
                }
              }).c_str());
  std::printf("  pre-tokenizer alone  %s\n", rate(reps, bytes, [&] {
                                               ends.clear();
                                               tok.pretokenizer().split(text, true, ends);
                                             }).c_str());
  std::string decoded;
  std::printf("  decode               %s\n",
              rate(reps, bytes, [&] { decoded = tok.decode(ids); }).c_str());
  if (decoded != text) {
    std::fprintf(stderr, "decode(encode(text)) differs from the text\n");
    return 1;
  }
  return 0;
}
