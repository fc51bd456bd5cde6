#include "k3/kernels/gemm.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/kernels/gemm_few_rows.h"
#include "k3/tensor/bf16.h"

namespace k3::kernels {

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

std::optional<Precision> parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::F32;
  if (name == "bf16") return Precision::BF16;
  return std::nullopt;
}

// Whether oneDNN's effective instruction set (which ONEDNN_MAX_CPU_ISA may hold down) includes isa.
static bool onednn_isa_reaches(dnnl::cpu_isa isa) {
  const auto effective = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (effective & static_cast<unsigned>(isa)) == static_cast<unsigned>(isa);
}

bool bf16_dot_products() {
#ifdef __AVX512BF16__
  static const bool available = onednn_isa_reaches(dnnl::cpu_isa::avx512_core_bf16);
  return available;
#else
  return false;
#endif
}

// Whether oneDNN's instruction set reaches AVX-512 here: k3lab's own AVX-512 products follow it,
// so that a run held below it (ONEDNN_MAX_CPU_ISA=AVX2) computes as on a CPU without AVX-512.
static bool avx512_products() {
  static const bool available = onednn_isa_reaches(dnnl::cpu_isa::avx512_core);
  return available;
}

static void check_args(const GemmArgs& g) {
  K3_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0, "gemm: negative size M=", g.M, " N=", g.N, " K=", g.K);
  K3_CHECK(g.lda >= (g.trans_a ? g.M : g.K) && g.ldb >= (g.trans_b ? g.K : g.N) && g.ldc >= g.N,
           "gemm: leading dimension too small (lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc,
           ") for M=", g.M, " N=", g.N, " K=", g.K);
}

// Two oneDNN backends, picked per product by its shape (deterministically, so that a run and its
// resumption compute bit for bit the same). Measured in training steps (L12 d768 model, 1024
// tokens) on AVX-512: the sgemm API runs A·B and Aᵀ·B products at 0.85-0.92 of the FMA peak but
// A·Bᵀ (every linear layer's forward, with weights stored [out, in]) at 0.68-0.80, and a tall Aᵀ·B
// (the LM head's weight gradient, [V, d] over tokens) at 0.70; the matmul primitive (brgemm) runs
// those at 0.81-0.90. Small products (the chunked KDA's per-chunk ones) stay on sgemm, whose
// per-call cost is lower.
//
// A·Bᵀ of 128-255 rows (one prompt's prefill) runs whole on the primitive too: there sgemm, which
// packs the weight again on every call, made the L6 d384 model's 128-token prefill 1.24x slower.
//
// The token count is the dimension that changes between calls (a MoE expert's rows, a last short
// chunk): M of A·Bᵀ, K of Aᵀ·B. The primitive takes its largest multiple of kTokenQuantum and
// sgemm the rest, so that the primitives built stay few and are reused from step to step.
enum class Backend { Sgemm, Matmul };
constexpr int64_t kTokenQuantum = 256;

static Backend backend(const GemmArgs& g) {
  const double flops =
      2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  const bool wide_transposed_b = g.trans_b && !g.trans_a && g.M >= kTokenQuantum;
  const bool tall_transposed_a = g.trans_a && !g.trans_b && g.M >= 4 * g.N && g.K >= kTokenQuantum;
  const bool short_transposed_b =
      g.trans_b && !g.trans_a && g.M >= kTokenQuantum / 2 && g.M < kTokenQuantum && flops >= 16e6;
  return (flops >= 64e6 && (wide_transposed_b || tall_transposed_a)) || short_transposed_b
             ? Backend::Matmul
             : Backend::Sgemm;
}

// The matmul primitive for one product's shape, strides, alpha and beta: built once per thread and
// cached (building one takes far longer than running it).
// BATCH products of one shape at once, the i-th's operands and result at i times the strides.
struct MatmulBatch {
  int64_t count = 1, a = 0, b = 0, c = 0;
  bool operator==(const MatmulBatch&) const = default;
};

class MatmulCache {
 public:
  // g's A and B are read from a and b, fp32 or bf16 by g.precision.
  void run(const GemmArgs& g, const void* a_data, const void* b_data,
           const MatmulBatch& batch = {}) {
    const Key key{g.trans_a, g.trans_b, g.precision, g.M,     g.N,    g.K,
                  g.lda,     g.ldb,     g.ldc,       g.alpha, g.beta, batch};
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(key, build(g, batch)).first;
    Entry& e = it->second;
    dnnl::memory a(e.a, engine_, const_cast<void*>(a_data)),
        b(e.b, engine_, const_cast<void*>(b_data)), c(e.c, engine_, g.C);
    e.matmul.execute(stream_, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  }

 private:
  struct Key {
    bool ta, tb;
    Precision precision;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    MatmulBatch batch;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      size_t h = std::hash<int64_t>()(k.M);
      for (int64_t v : {k.N, k.K, k.lda, k.ldb, k.ldc,
                        int64_t(k.ta) * 4 + int64_t(k.tb) * 2 + int64_t(k.precision), k.batch.count,
                        k.batch.a, k.batch.b, k.batch.c})
        h = h * 1099511628211ull ^ std::hash<int64_t>()(v);
      return h ^ std::hash<float>()(k.alpha) ^ (std::hash<float>()(k.beta) << 1);
    }
  };
  struct Entry {
    dnnl::memory::desc a, b, c;
    dnnl::matmul matmul;
  };

  Entry build(const GemmArgs& g, const MatmulBatch& batch) {
    using dims = dnnl::memory::dims;
    const auto f32 = dnnl::memory::data_type::f32;
    const auto in = g.precision == Precision::BF16 ? dnnl::memory::data_type::bf16 : f32;
    // A stored [K, M] (trans_a) is op(A) [M, K] with strides (1, lda); likewise B. Batched, each
    // gains an outer dimension.
    auto desc = [&](int64_t rows, int64_t cols, dims strides, int64_t stride,
                    dnnl::memory::data_type type) {
      if (batch.count <= 1) return dnnl::memory::desc({rows, cols}, type, strides);
      return dnnl::memory::desc({batch.count, rows, cols}, type, {stride, strides[0], strides[1]});
    };
    const auto a = desc(g.M, g.K, g.trans_a ? dims{1, g.lda} : dims{g.lda, 1}, batch.a, in);
    const auto b = desc(g.K, g.N, g.trans_b ? dims{1, g.ldb} : dims{g.ldb, 1}, batch.b, in);
    const auto c = desc(g.M, g.N, dims{g.ldc, 1}, batch.c, f32);
    dnnl::primitive_attr attr;
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    if (g.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(g.beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
    return {a, b, c, dnnl::matmul(pd)};
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::unordered_map<Key, Entry, KeyHash> entries_;
};

static void run_sgemm(const GemmArgs& g) {
  dnnl_status_t st = dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.M, g.N, g.K,
                                g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc);
  K3_CHECK(st == dnnl_success, "gemm: oneDNN sgemm failed with status ", static_cast<int>(st));
}

static void run_matmul(const GemmArgs& g, const void* a, const void* b,
                       const MatmulBatch& batch = {}) {
  thread_local MatmulCache cache;
  try {
    cache.run(g, a, b, batch);
  } catch (const dnnl::error& e) {
    K3_CHECK(false, "gemm: oneDNN matmul failed: ", e.what());
  }
}

// A bf16 copy of the rows x cols matrix at `in` (leading dimension ld), packed into this thread's
// scratch (which grows to the largest operand and is then reused): as it is (leading dimension
// cols) or transposed (cols x rows, leading dimension rows), in 32 x 32 tiles.
static const uint16_t* to_bf16(const float* in, int64_t ld, int64_t rows, int64_t cols,
                               bool transpose, std::vector<uint16_t>& scratch) {
  K3_CHECK(in != nullptr, "gemm: a bf16 product needs an fp32 or a bf16 pointer for each operand");
  if (scratch.size() < static_cast<size_t>(rows * cols))
    scratch.resize(static_cast<size_t>(rows * cols));
  uint16_t* out = scratch.data();
  if (ld == cols && !transpose) {
    float_to_bf16(in, out, rows * cols);
    return out;
  }
  constexpr int64_t kTile = 32;
  const bool threaded = rows * cols > 65536 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t nr = std::min(kTile, rows - r0);
    if (!transpose) {
      for (int64_t r = r0; r < r0 + nr; ++r) float_to_bf16(in + r * ld, out + r * cols, cols);
      continue;
    }
    uint16_t tile[kTile][kTile];
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t nc = std::min(kTile, cols - c0);
      for (int64_t r = 0; r < nr; ++r) float_to_bf16(in + (r0 + r) * ld + c0, tile[r], nc);
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t r = 0; r < nr; ++r) out[(c0 + c) * rows + r0 + r] = tile[r][c];
    }
  }
  return out;
}

static void run_one(const GemmArgs& g);

// Whether oneDNN builds bf16 matmuls here: not where its instruction set is held below AVX-512
// (ONEDNN_MAX_CPU_ISA=AVX2) or the CPU lacks it.
static bool bf16_matmul_available() {
  static const bool available = [] {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const auto bf16 = dnnl::memory::data_type::bf16;
      const dnnl::memory::desc a({16, 16}, bf16, dnnl::memory::format_tag::ab),
          c({16, 16}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// Without bf16 matmuls, the same arithmetic in fp32: each operand rounded to bf16 and held as
// fp32 (a product of two bf16 values is exact in fp32), multiplied by the fp32 path.
static void run_bf16_as_f32(const GemmArgs& g) {
  thread_local std::vector<float> scratch_a, scratch_b;
  auto rounded = [](const float* x, const uint16_t* x_bf16, int64_t ld, int64_t rows, int64_t cols,
                    std::vector<float>& scratch) {
    K3_CHECK(x || x_bf16, "gemm: a bf16 product needs an fp32 or a bf16 pointer for each operand");
    if (scratch.size() < static_cast<size_t>(rows * cols))
      scratch.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        scratch[r * cols + c] =
            bf16_to_float(x_bf16 ? x_bf16[r * ld + c] : float_to_bf16(x[r * ld + c]));
    return scratch.data();
  };
  GemmArgs p = g;
  p.precision = Precision::F32;
  p.A_bf16 = p.B_bf16 = nullptr;
  p.lda = g.trans_a ? g.M : g.K;
  p.ldb = g.trans_b ? g.K : g.N;
  p.A = rounded(g.A, g.A_bf16, g.lda, g.trans_a ? g.K : g.M, p.lda, scratch_a);
  p.B = rounded(g.B, g.B_bf16, g.ldb, g.trans_b ? g.N : g.K, p.ldb, scratch_b);
  run_one(p);
}

// The token counts change from call to call (a MoE expert's rows; the reduction of a weight
// gradient Aᵀ·B): M, and K when A was stored transposed. Each new shape would build a primitive,
// so a bf16 product runs on the primitive of M and K rounded up to kBf16Quantum, its operands
// padded with zeros (nothing added to the sums) and its C through a scratch when M is padded.
constexpr int64_t kBf16Quantum = 32;

static void run_matmul_padded(const GemmArgs& p, const uint16_t* a, const uint16_t* b, bool pad_k) {
  auto up = [](int64_t n) { return (n + kBf16Quantum - 1) / kBf16Quantum * kBf16Quantum; };
  const int64_t M = up(p.M), K = pad_k ? up(p.K) : p.K;
  if ((M == p.M && K == p.K) || p.trans_a) return run_matmul(p, a, b);
  thread_local std::vector<uint16_t> padded_a, padded_b;
  thread_local std::vector<float> padded_c;
  padded_a.assign(static_cast<size_t>(M * K), 0);
  for (int64_t i = 0; i < p.M; ++i) std::copy_n(a + i * p.lda, p.K, padded_a.data() + i * K);
  GemmArgs q = p;
  q.M = M;
  q.K = K;
  q.lda = K;
  if (K > p.K) {  // B's rows (or, stored transposed, its columns) past p.K are zeros
    const int64_t rows = p.trans_b ? p.N : K, cols = p.trans_b ? K : p.N;
    padded_b.assign(static_cast<size_t>(rows * cols), 0);
    for (int64_t r = 0; r < (p.trans_b ? p.N : p.K); ++r)
      std::copy_n(b + r * p.ldb, p.trans_b ? p.K : p.N, padded_b.data() + r * cols);
    q.ldb = cols;
    b = padded_b.data();
  }
  if (M == p.M) return run_matmul(q, padded_a.data(), b);
  padded_c.resize(static_cast<size_t>(M * p.N));
  q.C = padded_c.data();
  q.ldc = p.N;
  q.beta = 0.0f;
  run_matmul(q, padded_a.data(), b);
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < p.N; ++j) {
      float& c = p.C[i * p.ldc + j];
      c = padded_c[i * p.N + j] + (p.beta == 0.0f ? 0.0f : p.beta * c);
    }
}

// Every bf16 product runs on the matmul primitive (oneDNN has no bf16 gemm call), its operands
// converted here unless given in bf16. A stored transposed is converted into [M, K]: oneDNN's
// bf16 matmul runs Aᵀ·B (the weight gradients) at a third of A·B's rate. A·Bᵀ of a few rows
// (decoding's) runs on k3lab's own kernel instead (gemm_few_rows.h).
static void run_bf16(const GemmArgs& g) {
  if (!bf16_matmul_available()) return run_bf16_as_f32(g);
  thread_local std::vector<uint16_t> scratch_a, scratch_b;
  GemmArgs p = g;
  const uint16_t* a = g.A_bf16;
  const uint16_t* b = g.B_bf16;
  ProfileScope time(omp_in_parallel() ? nullptr : "gemm: operands to bf16");
  const bool few_rows = g.trans_b && g.M <= kFewRows && few_rows_bf16_built();
  if (!a) {
    p.trans_a = false;
    p.lda = g.K;
    a = to_bf16(g.A, g.lda, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.trans_a, scratch_a);
  } else if (g.trans_a && few_rows) {  // a few columns of a given bf16 Aᵀ, packed as rows
    p.trans_a = false;
    p.lda = g.K;
    scratch_a.resize(static_cast<size_t>(g.M * g.K));
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t k = 0; k < g.K; ++k) scratch_a[i * g.K + k] = g.A_bf16[k * g.lda + i];
    a = scratch_a.data();
  }
  if (!b) {
    p.ldb = g.trans_b ? g.K : g.N;
    b = to_bf16(g.B, g.ldb, g.trans_b ? g.N : g.K, p.ldb, false, scratch_b);
  }
  time.stop();
  if (few_rows) return gemm_few_rows_bf16(p, a, b);
  run_matmul_padded(p, a, b, g.trans_a);
}

// oneDNN runs multi-threaded when called from serial code and single-threaded inside an OpenMP
// parallel region (the threading policy in base/threads.h).
static void run_one(const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {  // C = beta * C
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j)
        g.C[i * g.ldc + j] = g.beta == 0 ? 0 : g.beta * g.C[i * g.ldc + j];
    return;
  }
  if (g.precision == Precision::BF16) return run_bf16(g);
  // A·Bᵀ of a few rows (decoding's) on k3lab's own kernel, as under bf16 (gemm_few_rows.h), up to
  // 4 rows: measured on a d-768 model's decoding products, it reads the weights 1.3-1.6 times as
  // fast as sgemm at 1 and 2 rows, alike at 3 and 4, 0.85-0.9 times at 6 and 8.
  if (!g.trans_a && g.trans_b && g.M <= 4 && few_rows_f32_built() && avx512_products())
    return gemm_few_rows_f32(g);
  if (backend(g) == Backend::Sgemm) return run_sgemm(g);
  if (g.trans_b && g.M < kTokenQuantum) return run_matmul(g, g.A, g.B);  // a short A·Bᵀ, whole
  GemmArgs bulk = g, rest = g;
  if (g.trans_b) {  // A·Bᵀ: rows of A and C
    bulk.M = g.M / kTokenQuantum * kTokenQuantum;
    rest.M = g.M - bulk.M;
    rest.A = g.A + bulk.M * g.lda;
    rest.C = g.C + bulk.M * g.ldc;
  } else {  // Aᵀ·B: the reduction, the rest accumulated onto the bulk
    bulk.K = g.K / kTokenQuantum * kTokenQuantum;
    rest.K = g.K - bulk.K;
    rest.A = g.A + bulk.K * g.lda;
    rest.B = g.B + bulk.K * g.ldb;
    rest.beta = 1.0f;
  }
  run_matmul(bulk, bulk.A, bulk.B);
  if (rest.M > 0 && rest.K > 0) run_sgemm(rest);
}

void gemm(const GemmArgs& g) {
  check_args(g);
  ProfileScope time(omp_in_parallel() ? nullptr : "gemm");
  run_one(g);
}

// Products this small run faster as one batched matmul primitive than one sgemm call each: at
// one thread 2.3x for 32³ and 1.5x for 64³ (fp32, hundreds of them); 128³ runs alike both ways.
// A batch of one takes the primitive too: a product's bits must not depend on how many share its
// batch (a ZeRO owner orthogonalizes its share of Muon's blocks as one process does all of them).
constexpr int64_t kBatchedMatmulMax = 64 * 64 * 128;  // multiply-adds of one product

// A batch's operand, `rows` x `cols` per item at x + i·stride (leading dimension ld), in bf16 with
// its items one after another: as given in bf16 when so stored, else converted from fp32 into
// scratch (null where only a bf16 operand with gaps between its rows or items was given).
static const uint16_t* packed_bf16(const float* x, const uint16_t* x_bf16, int64_t ld, int64_t rows,
                                   int64_t cols, int64_t stride, int64_t batch,
                                   std::vector<uint16_t>& scratch) {
  if (x_bf16 && ld == cols && (batch == 1 || stride == rows * cols)) return x_bf16;
  if (!x) return nullptr;
  scratch.resize(static_cast<size_t>(batch * rows * cols));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < rows; ++r)
      float_to_bf16(x + i * stride + r * ld, scratch.data() + (i * rows + r) * cols, cols);
  return scratch.data();
}

// Small bf16 products as one batched primitive, like fp32's (below), on operands packed in bf16;
// without bf16 matmuls here, the packed operands widened back to fp32 (exactly) and one batched
// fp32 primitive, as run_bf16_as_f32 does for one product. False where A is stored transposed or
// given in bf16 with gaps: those run one by one.
static bool run_bf16_batched(const GemmArgs& g, int64_t batch, int64_t stride_a, int64_t stride_b,
                             int64_t stride_c) {
  if (g.trans_a) return false;
  thread_local std::vector<uint16_t> scratch_a, scratch_b;
  thread_local std::vector<float> wide_a, wide_b;
  GemmArgs p = g;
  p.lda = g.K;
  p.ldb = g.trans_b ? g.K : g.N;
  const MatmulBatch items{batch, g.M * g.K, g.K * g.N, stride_c};
  const uint16_t* a;
  const uint16_t* b;
  {
    ProfileScope time("gemm: operands to bf16");
    a = packed_bf16(g.A, g.A_bf16, g.lda, g.M, g.K, stride_a, batch, scratch_a);
    b = packed_bf16(g.B, g.B_bf16, g.ldb, g.trans_b ? g.N : g.K, p.ldb, stride_b, batch, scratch_b);
    if (!a || !b) return false;
    if (!bf16_matmul_available()) {
      wide_a.resize(static_cast<size_t>(batch * g.M * g.K));
      wide_b.resize(static_cast<size_t>(batch * g.K * g.N));
      bf16_to_float(a, wide_a.data(), batch * g.M * g.K);
      bf16_to_float(b, wide_b.data(), batch * g.K * g.N);
      p.precision = Precision::F32;
    }
  }
  if (p.precision == Precision::F32)
    run_matmul(p, wide_a.data(), wide_b.data(), items);
  else
    run_matmul(p, a, b, items);
  return true;
}

void gemm_batched(const GemmArgs& g, int64_t batch, int64_t stride_a, int64_t stride_b,
                  int64_t stride_c) {
  check_args(g);
  ProfileScope time(omp_in_parallel() ? nullptr : "gemm");
  if (batch >= 1 && g.M * g.N * g.K <= kBatchedMatmulMax && g.M > 0 && g.N > 0 && g.K > 0 &&
      !omp_in_parallel()) {
    if (g.precision == Precision::F32)
      return run_matmul(g, g.A, g.B, {batch, stride_a, stride_b, stride_c});
    if (run_bf16_batched(g, batch, stride_a, stride_b, stride_c)) return;
  }
  auto item = [&](int64_t i) {
    GemmArgs gi = g;
    if (g.A) gi.A = g.A + i * stride_a;
    if (g.B) gi.B = g.B + i * stride_b;
    if (g.A_bf16) gi.A_bf16 = g.A_bf16 + i * stride_a;
    if (g.B_bf16) gi.B_bf16 = g.B_bf16 + i * stride_b;
    gi.C = g.C + i * stride_c;
    run_one(gi);
  };
  // Many small products: one per thread. Few large ones: each uses every thread.
  const double flops =
      2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  if (batch >= omp_get_max_threads() && flops < 64e6 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < batch; ++i) item(i);
  } else {
    for (int64_t i = 0; i < batch; ++i) item(i);
  }
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C, Precision precision) {
  gemm(GemmArgs{trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C,
                N, precision});
}

}  // namespace k3::kernels
