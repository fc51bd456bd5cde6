// The gated delta rule of KDA, forward + backward, B = 1, H = 4, K = V = 128, T = 1K, 4K, 16K:
// the chunked WY algorithm against the recurrent reference (tokens/s and their ratio), and the
// chunked path's GFLOP/s next to an sgemm measured in the same run; then the extra memory of a
// chunked forward + backward at T = 16K. The host is shared and noisy, so the three are timed
// in turns (`--turns N`, default 5), one run of each per turn: each time is the best of its
// turns, and the chunked/recurrent ratio is given per turn (median [min-max]). Last, the chunked
// path's compute floor: one chunk of one head on one thread with all its data in cache, next to
// its K×V-sized products alone, and the T = 4K time that rate would give. Each turn also runs the
// chunked path in bf16 (DeltaRuleShape::precision): its tokens/s and its speedup per turn.
//
// FLOPs of the chunked algorithm per head and chunk of L = 64 tokens, each product counted at the
// size the algorithm needs (triangular products at their triangle, L(L+1)/2 ≈ L²/2 pairs):
//   forward   6·L·K·V    [Γ⊙Q; Γ⊙K]·S, (e^{G_L−G}⊙K)ᵀ·Ṽ
//           + 2·K·L²     Aqk, Pkk
//           + 2·V·L²     Ṽ = X·Diag(β)(V − (Γ⊙K)S), Aqk·Ṽ
//           + L³/3       X = (I + Diag(β) Pkk)⁻¹
//   backward 12·L·K·V    (e^{G_L−G}⊙K)·dS, [dO; −dR]·Sᵀ, Ṽ·dSᵀ, [Γ⊙Q; Γ⊙K]ᵀ·[dO; −dR]
//           + 4·K·L²     the gradients of Aqk, Pkk to both sides
//           + 4·V·L²     Aqkᵀ·dO, Xᵀ·dṼ, [Y; dO]·Ṽᵀ
// (the backward reads Ṽ, V − (Γ⊙K)S, Aqk, Pkk and X from the forward's chunk records).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/arena.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/kernels/kda/delta_rule.h"
#include "peak.h"
#include "resident.h"
#include "spread.h"

namespace {

namespace kda = k3::kernels::kda;

constexpr int64_t kHeads = 4, kDim = 128;

double chunked_flops_per_token(double K, double V) {
  const double L = static_cast<double>(kda::kChunk);
  const double forward = 6 * L * K * V + 2 * K * L * L + 2 * V * L * L + L * L * L / 3;
  const double backward = 12 * L * K * V + 4 * K * L * L + 4 * V * L * L;
  return (forward + backward) / L;
}

// Pre-faulted memory on huge pages where the kernel allows, as the model's arenas provide it.
template <typename T>
struct MappedAllocator {
  using value_type = T;
  MappedAllocator() = default;
  template <typename U>
  MappedAllocator(const MappedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(k3::map_buffer(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { k3::unmap_buffer(p, n * sizeof(T)); }
  bool operator==(const MappedAllocator&) const { return true; }
};
using Floats = std::vector<float, MappedAllocator<float>>;

// Inputs shaped like the KDA layer's: unit q, k (q scaled by K^−1/2), bounded decay, β in (0, 1).
struct Problem {
  kda::DeltaRuleShape s;
  Floats q, k, v, g, beta, dout, out, final_state, dq, dk, dv, dg, dbeta, saved;

  explicit Problem(int64_t T, int64_t heads = kHeads) {
    s.B = 1, s.T = T, s.H = heads, s.K = kDim, s.V = kDim;
    const auto rows = static_cast<size_t>(T * heads);
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal;
    for (auto* x : {&q, &k, &v, &g, &dout}) {
      x->resize(rows * kDim);
      for (auto& e : *x) e = normal(rng);
    }
    for (size_t r = 0; r < rows; ++r) {
      float* qr = &q[r * kDim];
      float* kr = &k[r * kDim];
      float nq = 0, nk = 0;
      for (int64_t c = 0; c < kDim; ++c) nq += qr[c] * qr[c], nk += kr[c] * kr[c];
      for (int64_t c = 0; c < kDim; ++c) qr[c] /= std::sqrt(nq * kDim), kr[c] /= std::sqrt(nk);
    }
    for (auto& x : g) x = -5.0f / (1.0f + std::exp(3.0f - x));
    beta.resize(rows);
    for (auto& x : beta) x = 1.0f / (1.0f + std::exp(-normal(rng)));
    for (auto* x : {&out, &dq, &dk, &dv, &dg}) x->assign(rows * kDim, 0.0f);
    dbeta.assign(rows, 0.0f);
    final_state.assign(static_cast<size_t>(heads * kDim * kDim), 0.0f);
  }
  kda::DeltaRuleInputs<float> inputs() const {
    return {q.data(), k.data(), v.data(), g.data(), beta.data()};
  }
  kda::DeltaRuleGrads<float> grads() {
    return {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data()};
  }

  void chunked() {
    saved.resize(static_cast<size_t>(kda::chunk_saved_floats(s)));
    kda::chunk_forward(s, inputs(), out.data(), final_state.data(), saved.data());
    kda::chunk_backward(s, inputs(), saved.data(), dout.data(), nullptr, grads());
  }
  void recurrent() {
    kda::recurrent_forward(s, inputs(), out.data(), final_state.data());
    kda::recurrent_backward<float>(s, inputs(), dout.data(), nullptr, grads());
  }
};

using Sgemm = k3::bench::Sgemm<Floats>;  // the yardstick, on the same memory as the problems

template <typename Body>
double seconds(Body&& body) {
  k3::Timer t;
  body();
  return t.seconds();
}

// Prints one line; returns the recurrent path's best seconds. Each turn runs the chunked path,
// the recurrent one and the sgemm once, so all three get the same number of runs and each
// turn's chunked/recurrent ratio is measured side by side.
double compare(int64_t T, int turns, Sgemm& sgemm) {
  Problem p(T);
  p.chunked();  // warm the per-thread buffers and oneDNN's kernels
  sgemm.run();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double chunked = kInf, recurrent = kInf, gemm = kInf, bf16 = kInf;
  std::vector<double> ratios, bf16_ratios;
  for (int turn = 0; turn < turns; ++turn) {
    const double c = seconds([&] { p.chunked(); }), r = seconds([&] { p.recurrent(); });
    p.s.precision = k3::kernels::Precision::BF16;
    const double b = seconds([&] { p.chunked(); });
    p.s.precision = k3::kernels::Precision::F32;
    chunked = std::min(chunked, c);
    recurrent = std::min(recurrent, r);
    bf16 = std::min(bf16, b);
    ratios.push_back(r / c);
    bf16_ratios.push_back(c / b);
    gemm = std::min(gemm, seconds([&] { sgemm.run(); }));
  }
  const double tokens = static_cast<double>(T);
  const double gflops = tokens * kHeads * chunked_flops_per_token(kDim, kDim) / chunked / 1e9;
  const double sgemm_gflops = Sgemm::flops() / gemm / 1e9;
  std::printf(
      "T=%-6lld chunked %8.0f tokens/s (%7.1f ms, %5.1f GFLOP/s = %.2f x sgemm %5.1f)   "
      "recurrent %7.0f tokens/s (%7.1f ms)   chunked/recurrent per turn %sx\n"
      "         chunked in bf16 %8.0f tokens/s, fp32/bf16 per turn %sx\n",
      static_cast<long long>(T), tokens / chunked, chunked * 1e3, gflops, gflops / sgemm_gflops,
      sgemm_gflops, tokens / recurrent, recurrent * 1e3,
      k3::bench::spread_text(k3::bench::spread(ratios), "%.1f").c_str(), tokens / bf16,
      k3::bench::spread_text(k3::bench::spread(bf16_ratios), "%.2f").c_str());
  return recurrent;
}

// Best seconds per call of `body` over 5 turns of `calls` calls.
template <typename Body>
double best_per_call(int calls, Body&& body) {
  double best = std::numeric_limits<double>::infinity();
  for (int turn = 0; turn < 5; ++turn)
    best = std::min(best, seconds([&] {
                            for (int i = 0; i < calls; ++i) body();
                          }) / calls);
  return best;
}

// The nine K×V-sized products of one chunk (the 18·L·K·V FLOPs of the header), as the chunked
// path issues them: forward (Γ⊙K)·S, (Γ⊙Q)·S, (e^{G_L−G}⊙K)ᵀ·Ṽ; backward (e^{G_L−G}⊙K)·dS,
// [dO; −dR]·Sᵀ, Ṽ·dSᵀ, [Γ⊙Q; Γ⊙K]ᵀ·[dO; −dR].
void chunk_products(const float* a, const float* b, float* c) {
  namespace kn = k3::kernels;
  constexpr int64_t L = kda::kChunk, K = kDim, V = kDim;
  kn::gemm(false, false, L, V, K, 1.0f, a, b, 0.0f, c);
  kn::gemm(false, false, L, V, K, 1.0f, a, b, 0.0f, c);
  kn::gemm(true, false, K, V, L, 1.0f, a, b, 1.0f, c);
  kn::gemm(false, false, L, V, K, 1.0f, a, b, 0.0f, c);
  kn::gemm(false, true, 2 * L, K, V, 1.0f, a, b, 0.0f, c);
  kn::gemm(false, true, L, K, V, 1.0f, a, b, 0.0f, c);
  kn::gemm(true, false, K, V, 2 * L, 1.0f, a, b, 1.0f, c);
}

// What one chunk of one head costs with everything in cache, on one thread: the chunked path's
// compute floor, without the memory traffic of a long sequence (inputs, outputs and the saved
// records of T = 4K far exceed the caches), and the T = 4K time it would give.
void report_floor(double recurrent_4k) {
  const int threads = k3::num_threads();
  k3::set_num_threads(1);
  Problem p(kda::kChunk, 1);
  const double chunk = best_per_call(200, [&] { p.chunked(); });
  Floats a(2 * kda::kChunk * kDim, 0.01f), b(2 * kda::kChunk * kDim, 0.02f), c(kDim * kDim);
  const double products = best_per_call(200, [&] { chunk_products(a.data(), b.data(), c.data()); });
  k3::set_num_threads(threads);
  const double L = static_cast<double>(kda::kChunk);
  const double chunks_4k = 4096.0 / L * kHeads / threads;
  std::printf(
      "one chunk of one head, in cache, 1 thread: forward + backward %.1f us (%.1f GFLOP/s), of "
      "which its nine K x V-sized products alone take %.1f us (%.1f GFLOP/s)\n"
      "at that rate, every chunk's data in cache, T=4096 would take %.1f ms on %d threads: %.1fx "
      "the recurrent run above\n",
      chunk * 1e6, L * chunked_flops_per_token(kDim, kDim) / chunk / 1e9, products * 1e6,
      18 * L * kDim * kDim / products / 1e9, chunk * chunks_4k * 1e3, threads,
      recurrent_4k / (chunk * chunks_4k));
}

// Extra resident memory of one chunked forward + backward at T = 16K beyond its inputs and
// outputs: the saved chunk records, the per-thread workspaces, oneDNN's buffers.
void report_memory() {
  Problem p(16384);
  const bool exact = k3::bench::reset_resident_peak();
  const size_t before = k3::bench::status_bytes("VmRSS");
  p.chunked();
  const size_t peak = k3::bench::status_bytes("VmHWM");
  const double mib = 1024.0 * 1024.0;
  const int64_t chunks = (p.s.T + kda::kChunk - 1) / kda::kChunk;
  const double states = static_cast<double>(chunks * kHeads * kDim * kDim * sizeof(float));
  std::printf(
      "T=16384 chunked forward + backward: %.1f MiB above inputs and outputs (peak RSS%s), of "
      "which chunk records %.1f MiB (%lld chunks x %lld heads: entry states %.1f MiB, products "
      "%.1f MiB)\n",
      static_cast<double>(peak - before) / mib, exact ? "" : ", not resettable: upper bound",
      static_cast<double>(p.saved.size() * sizeof(float)) / mib, static_cast<long long>(chunks),
      static_cast<long long>(kHeads), states / mib,
      static_cast<double>(p.saved.size() * sizeof(float)) / mib - states / mib);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int turns = 5;
    for (const auto& [flag, value] : k3::bench::parse_flags(argc, argv, {"--turns"}))
      turns = std::stoi(value);
    if (turns < 1) throw std::runtime_error("--turns must be >= 1");
    k3::set_num_threads();
    report_memory();
    k3::bench::fma_peak_gflops();
    std::printf("B=1 H=%lld K=V=%lld, forward + backward, %d threads, best of %d turns\n",
                static_cast<long long>(kHeads), static_cast<long long>(kDim), k3::num_threads(),
                turns);
    Sgemm sgemm;
    compare(1024, turns, sgemm);
    const double recurrent_4k = compare(4096, turns, sgemm);
    compare(16384, turns, sgemm);
    report_floor(recurrent_4k);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
