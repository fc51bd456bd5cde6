// GEMM throughput on the products of GPT-2 small's linear layers over N = B*T = 4*1024 tokens
// (d = 768), and a 4096³ square, as a fraction of the measured fp32 FMA peak.
#include "k3/kernels/gemm.h"

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "flops.h"
#include "k3/base/threads.h"

namespace {

struct Product {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
};

void run(benchmark::State& state, Product p) {
  std::vector<float> A(p.M * p.K, 0.01f), B(p.K * p.N, 0.02f), C(p.M * p.N, 0.0f);
  auto once = [&] {
    k3::kernels::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), B.data(), p.beta, C.data());
  };
  once();  // oneDNN generates its kernels on first use
  k3::bench::run_with_flop_counters(state, 2.0 * double(p.M) * double(p.N) * double(p.K), once);
}

void add(const std::string& name, Product p) {
  benchmark::RegisterBenchmark(name.c_str(), run, p)->UseRealTime()->Unit(benchmark::kMillisecond);
}

// A linear layer y = x Wᵀ, W [out, in], over `tokens` rows: forward, and the two backward products
// dX = dY W and dW += dYᵀ X (accumulated, as gradients are).
void add_linear(const std::string& layer, int64_t tokens, int64_t in, int64_t out) {
  add("gemm/" + layer + "/fwd_xWt", {false, true, tokens, out, in, 0.0f});
  add("gemm/" + layer + "/bwd_dX", {false, false, tokens, in, out, 0.0f});
  add("gemm/" + layer + "/bwd_dW", {true, false, out, in, tokens, 1.0f});
}

}  // namespace

int main(int argc, char** argv) {
  k3::set_num_threads();
  const int64_t tokens = 4 * 1024, d = 768;
  add_linear("qkv_768x2304", tokens, d, 3 * d);
  add_linear("attn_proj_768x768", tokens, d, d);
  add_linear("fc_768x3072", tokens, d, 4 * d);
  add_linear("fc_proj_3072x768", tokens, 4 * d, d);
  add("gemm/square_4096", {false, false, 4096, 4096, 4096, 0.0f});
  benchmark::Initialize(&argc, argv);
  k3::bench::fma_peak_gflops();  // measured (and printed) before the runs
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
