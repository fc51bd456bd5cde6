// Training batches drawn from mapped 16-bit shards against the same tokens held in memory as
// int32 (what the text and built-in sources do): the copy of each window out of a TokenView of
// several shards, with its 16 -> 32 bit widening, against a plain copy. 64 Mi tokens in shards of
// 8 Mi, batch 8 x seq_len 2048, the Batcher's shuffled order.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "k3/data/batcher.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/shards/shard_set.h"
#include "k3/data/shards/shard_writer.h"

namespace {

constexpr int64_t kTokens = int64_t{1} << 26, kShardTokens = int64_t{1} << 23;
constexpr int64_t kBatch = 8, kSeqLen = 2048;

// Documents of 1000 ids (each then eos) until kTokens.
std::vector<int32_t> make_tokens(const k3::data::Tokenizer& tok) {
  std::vector<int32_t> out;
  out.reserve(kTokens);
  for (int64_t i = 0; static_cast<int64_t>(out.size()) < kTokens; ++i)
    out.push_back(out.size() % 1001 == 1000 ? tok.eos_id() : static_cast<int32_t>((i * 131) % 256));
  return out;
}

struct Data {
  k3::data::ByteTokenizer tok;
  std::string dir = std::filesystem::temp_directory_path().string() + "/k3_bench_shards_" +
                    std::to_string(::getpid());
  std::vector<int32_t> memory;
  std::unique_ptr<k3::data::shards::ShardSet> shards;

  Data() : memory(make_tokens(tok)) {
    k3::data::shards::ShardDirectoryWriter w(dir, tok, kShardTokens);
    std::vector<int32_t> doc;
    for (int32_t id : memory) {
      if (id != tok.eos_id()) {
        doc.push_back(id);
        continue;
      }
      w.add(k3::data::shards::Split::train, doc);
      doc.clear();
    }
    w.finish();
    shards = std::make_unique<k3::data::shards::ShardSet>(dir, tok);
    memory.resize(static_cast<size_t>(shards->train().size()));  // the same stream
  }
  ~Data() { std::filesystem::remove_all(dir); }
};

Data& data() {
  static Data d;
  return d;
}

void run(benchmark::State& state, bool from_shards) {
  const Data& d = data();
  k3::data::Batcher b(from_shards ? d.shards->train() : k3::data::TokenView(d.memory), kBatch,
                      kSeqLen, 1);
  k3::data::Batch batch;
  for (int i = 0; i < 50; ++i) b.next(batch);  // the shuffled order built, pages touched once
  for (auto _ : state) {
    b.next(batch);
    benchmark::DoNotOptimize(batch.inputs.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch * kSeqLen);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("batches/int32_in_memory", run, false)->UseRealTime();
  benchmark::RegisterBenchmark("batches/uint16_mapped_shards", run, true)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
