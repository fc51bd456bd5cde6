// The FP8 E4M3 block codec (activation storage) in GB/s of fp32 input, vectorized against the
// scalar reference, on one thread and on a tensor the size of a k3-small activation (8 Mi values):
// the same bytes out, so the ratio is what vectorizing bought.
#include "k3/tensor/fp8_e4m3.h"

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "k3/base/threads.h"

namespace {

constexpr int64_t kValues = int64_t{8} << 20;

struct Data {
  std::vector<float> x, y;
  std::vector<char> codes;
  Data() : x(kValues), y(kValues), codes(k3::fp8_block_bytes(kValues)) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0, 1);
    for (float& v : x) v = normal(rng);
  }
};

Data& data() {
  static Data d;
  return d;
}

template <void (*Encode)(const float*, int64_t, void*)>
void encode(benchmark::State& state) {
  Data& d = data();
  for (auto _ : state) Encode(d.x.data(), kValues, d.codes.data());
  state.SetBytesProcessed(state.iterations() * kValues * int64_t{sizeof(float)});
}

template <void (*Encode)(const float*, int64_t, void*), void (*Decode)(const void*, int64_t, float*)>
void decode(benchmark::State& state) {
  Data& d = data();
  Encode(d.x.data(), kValues, d.codes.data());
  for (auto _ : state) Decode(d.codes.data(), kValues, d.y.data());
  state.SetBytesProcessed(state.iterations() * kValues * int64_t{sizeof(float)});
}

BENCHMARK(encode<k3::fp8_block_encode>)->Name("fp8/encode/vectorized")->UseRealTime();
BENCHMARK(encode<k3::ref::fp8_block_encode>)->Name("fp8/encode/scalar")->UseRealTime();
BENCHMARK(decode<k3::fp8_block_encode, k3::fp8_block_decode>)
    ->Name("fp8/decode/vectorized")
    ->UseRealTime();
BENCHMARK(decode<k3::ref::fp8_block_encode, k3::ref::fp8_block_decode>)
    ->Name("fp8/decode/scalar")
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  k3::set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
