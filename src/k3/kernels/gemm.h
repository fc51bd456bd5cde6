// GEMM, row-major: C = alpha * op(A) * op(B) + beta * C, with op(X) = X or Xᵀ.
// op(A) is [M, K] (A is stored [K, M] when trans_a); op(B) is [K, N] (B stored [N, K] when trans_b).
// beta = 1 accumulates into C (gradient accumulation). This is the one dispatch point for GEMM:
// the CPU backend runs oneDNN.
//
// Precision::BF16 rounds A and B to bf16 (nearest even) and multiplies them with fp32
// accumulation into the fp32 C (alpha and beta in fp32): mixed-precision training's products. An
// operand already held in bf16 (a weight's copy refreshed once per step) is passed as A_bf16 or
// B_bf16, laid out like A or B (same lda or ldb), and is then used instead of converting A or B,
// which may be null.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace k3::kernels {

enum class Precision : uint8_t { F32, BF16 };

const char* precision_name(Precision p);  // "fp32", "bf16"
std::optional<Precision> parse_precision(std::string_view name);  // its inverse

// Whether bf16 products run on bf16 dot-product instructions here: AVX512-BF16 in the build and
// within the instruction set oneDNN may use (which ONEDNN_MAX_CPU_ISA=AVX2 holds below it). Where
// not, every bf16 product (gemm's and the attention tiles') computes the same in fp32 on operands
// rounded to bf16.
bool bf16_dot_products();

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int64_t ldc = 0;
  Precision precision = Precision::F32;
  const uint16_t* A_bf16 = nullptr;
  const uint16_t* B_bf16 = nullptr;
};

void gemm(const GemmArgs& g);

// `batch` independent products; matrix i starts at A + i*stride_a (likewise B, C, A_bf16, B_bf16).
void gemm_batched(const GemmArgs& g, int64_t batch, int64_t stride_a, int64_t stride_b,
                  int64_t stride_c);

// Shorthand for contiguous operands: lda/ldb/ldc follow from the shapes.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C, Precision precision = Precision::F32);

}  // namespace k3::kernels
