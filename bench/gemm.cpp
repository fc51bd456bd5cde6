// GEMM throughput on the products of GPT-2 small's linear layers over N = B*T = 4*1024 tokens
// (d = 768), and a 4096³ square, as a fraction of the measured fp32 FMA peak; and in bf16 (fp32
// operands converted per call, as a bf16 training step's activations are; the weight given in
// bf16, as its copy is) the products of bench_train_vs_torch's two dense shapes, as a fraction of
// the bf16 dot-product peak: what a bf16 step's products alone reach. Last, the fp32 products of a
// 128-token prefill.
#include "k3/kernels/gemm.h"

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "flops.h"
#include "k3/base/threads.h"
#include "k3/tensor/bf16.h"

namespace {

using k3::kernels::Precision;

struct Product {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  Precision precision = Precision::F32;
  bool weight_is_b = false;  // bf16: B is a weight, given in bf16
};

void run(benchmark::State& state, Product p) {
  std::vector<float> A(p.M * p.K, 0.01f), B(p.K * p.N, 0.02f), C(p.M * p.N, 0.0f);
  std::vector<uint16_t> B_bf16(B.size());
  k3::float_to_bf16(B.data(), B_bf16.data(), static_cast<int64_t>(B.size()));
  const bool given = p.precision == Precision::BF16 && p.weight_is_b;
  const k3::kernels::GemmArgs g{p.ta,
                                p.tb,
                                p.M,
                                p.N,
                                p.K,
                                1.0f,
                                A.data(),
                                p.ta ? p.M : p.K,
                                given ? nullptr : B.data(),
                                p.tb ? p.K : p.N,
                                p.beta,
                                C.data(),
                                p.N,
                                p.precision,
                                nullptr,
                                given ? B_bf16.data() : nullptr};
  auto once = [&] { k3::kernels::gemm(g); };
  once();  // oneDNN generates its kernels on first use
  k3::bench::run_with_flop_counters(
      state, 2.0 * double(p.M) * double(p.N) * double(p.K), once,
      p.precision == Precision::BF16 ? k3::bench::bf16_peak_gflops() : 0);
}

void add(const std::string& name, Product p) {
  benchmark::RegisterBenchmark(name.c_str(), run, p)->UseRealTime()->Unit(benchmark::kMillisecond);
}

// A linear layer y = x Wᵀ, W [out, in], over `tokens` rows: forward, and the two backward products
// dX = dY W and dW += dYᵀ X (accumulated, as gradients are).
void add_linear(const std::string& layer, int64_t tokens, int64_t in, int64_t out,
                Precision precision = Precision::F32) {
  const std::string name = (precision == Precision::BF16 ? "gemm_bf16/" : "gemm/") + layer;
  add(name + "/fwd_xWt", {false, true, tokens, out, in, 0.0f, precision, true});
  add(name + "/bwd_dX", {false, false, tokens, in, out, 0.0f, precision, true});
  add(name + "/bwd_dW", {true, false, out, in, tokens, 1.0f, precision, false});
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
  // bench_train_vs_torch's shapes: L6 d384 (B8 T256, V 8192), L12 d768 (B4 T256, V 32768).
  for (const auto& [name, rows, dm, ffn, vocab] :
       {std::tuple<std::string, int64_t, int64_t, int64_t, int64_t>{"l6_d384", 2048, 384, 1024,
                                                                    8192},
        {"l12_d768", 1024, 768, 2048, 32768}}) {
    add_linear(name + "/attn_" + std::to_string(dm), rows, dm, dm, Precision::BF16);
    add_linear(name + "/mlp_up_" + std::to_string(ffn), rows, dm, ffn, Precision::BF16);
    add_linear(name + "/mlp_down_" + std::to_string(ffn), rows, ffn, dm, Precision::BF16);
    add_linear(name + "/lm_head_" + std::to_string(vocab), rows, dm, vocab, Precision::BF16);
  }
  // One 128-token prompt's prefill of L6 d384 (bench_decode_vs_torch), fp32: each layer's forward
  // products, x·Wᵀ of 128 rows.
  for (const auto& [layer, in, out] : {std::tuple<std::string, int64_t, int64_t>{"attn", 384, 384},
                                       {"mlp_up", 384, 1024},
                                       {"mlp_down", 1024, 384}})
    add("gemm/prefill_128/" + layer + "_" + std::to_string(in) + "x" + std::to_string(out),
        {false, true, 128, out, in, 0.0f});
  benchmark::Initialize(&argc, argv);
  k3::bench::fma_peak_gflops();  // measured (and printed) before the runs
  k3::bench::bf16_peak_gflops();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
