// Building blocks of the tiled attention kernels (the KDA chunk kernels use the first three
// too): the causal tile product on AVX-512 register blocks, a blocked transpose, per-thread
// buffers, and where one (batch, head) lives in the [B, T, H, dim] layouts of attention.h.
//
// A tile product in Precision::BF16 rounds its operands to bf16 (nearest even, as gemm does) and
// sums their products in fp32: each operand is rounded once per product into this thread's
// scratch, laid out in pairs along the reduction for vdpbf16ps (AVX512-BF16), or, where
// bf16_dot_products() is false, multiplied by fused multiply-adds in the same order (a product
// of two bf16 values is exact in fp32, so both ways round alike, apart from vdpbf16ps flushing
// denormals).
#pragma once

#include <cstddef>
#include <cstdint>

#include "k3/kernels/attention.h"
#include "k3/kernels/gemm.h"

namespace k3::kernels::attn {

// Queries and keys are cut into blocks of kBlock rows; a tile pairs a query block with a key block.
inline constexpr int64_t kBlock = 128;

inline int64_t num_blocks(int64_t T) { return (T + kBlock - 1) / kBlock; }

// The part of a product that a causal tile needs, in tile-local indices r (row of C), c (column
// of C), k (reduction). `off` is the offset of the band's edge: the start of the row block minus
// the start of the other block, or the reverse (see each use). Off-diagonal tiles pass an offset
// beyond the tile, so the band covers everything.
enum class Band {
  ColLe,  // only C[r][c] with c <= r + off is needed (other entries may be left unwritten)
  ColGe,  // only C[r][c] with c >= r + off is needed (other entries may be left unwritten)
  KLe,    // only terms with k <= r + off are nonzero
  KGe,    // only terms with k >= r + off are nonzero
};

// Operands of a tile product C[M, N] = A[M, K] · B[K, N].
struct Dims {
  int64_t M, N, K;
};
struct Lhs {  // A(r, k) = p[r*ld + k], or p[k*ld + r] when trans
  const float* p;
  int64_t ld;
  bool trans;
};
// A right operand rounded to bf16 once (round_rhs) for the several bf16 products that read it,
// in the pairs of rows they multiply: [(K + 1) / 2][N] words. Null pairs: not rounded (fp32).
struct RoundedRhs {
  const uint32_t* pairs = nullptr;
  int64_t K = 0, N = 0;
};
struct Rhs {  // B(k, c) = p[k*ld + c]; a bf16 product reads `rounded` instead where it has pairs
  const float* p;
  int64_t ld;
  const RoundedRhs* rounded = nullptr;
};
struct Out {  // C(r, c) = p[r*ld + c], overwritten or (accumulate) added to
  float* p;
  int64_t ld;
  bool accumulate;
};
struct Region {  // which part of the product the causal tile needs
  Band band;
  int64_t off;
};

// In bf16, the terms outside the band are dropped whatever A holds there.
void tile_gemm(Dims d, Lhs a, Rhs b, Out c, Region region, Precision precision = Precision::F32);

// B [K, N] rounded into out, rounded_words(K, N) words, when precision is bf16 (else nothing).
inline int64_t rounded_words(int64_t K, int64_t N) { return (K + 1) / 2 * N; }
RoundedRhs round_rhs(Rhs b, int64_t K, int64_t N, uint32_t* out, Precision precision);

// The right operand of scores: bt packed transposed, [dqk + dr, kBlock] (the n rows, then the r
// rows), N columns; in bf16 both parts rounded once for all the tiles that read them.
struct ScoresRhs {
  const float* bt;
  RoundedRhs n, r;
};
inline int64_t scores_rhs_words(const AttentionShape& s) {
  return rounded_words(s.dqk, kBlock) + rounded_words(s.dr, kBlock);
}
ScoresRhs scores_rhs(const AttentionShape& s, const float* bt, int64_t N, uint32_t* out);

// A tile of scores out[M, N] = <a_n, b_n> + <a_r, b_r>: the shared k_r part is a second product
// accumulated over the same tile. Keys x queries (a = key rows, b = queries) or queries x keys.
// In s.precision.
void scores(const AttentionShape& s, int64_t M, int64_t N, Lhs a_n, Lhs a_r, const ScoresRhs& b,
            float* out, Region region);

// dst[c*ld_dst + r] = src[r*ld_src + c] for r < rows, c < cols (16x16 register blocks, any
// rows and cols, including 0).
void transpose(int64_t rows, int64_t cols, const float* src, int64_t ld_src, float* dst,
               int64_t ld_dst);

// At least n floats owned by the calling thread, 64-byte aligned, kept for later calls (first
// touch of fresh pages is slow). Buffers live at the same time in one thread use distinct slots:
// Tile and Call for attention, Chunk for the chunked delta rule's workspaces (kda/chunk_tiles.h).
// Bf16 holds the rounded operands of a bf16 tile product.
enum class Slot { Tile, Call, Chunk, Bf16 };
float* thread_buffer(Slot slot, size_t n);

// Offsets of row t = 0 of one (batch, head) in each layout, and the row strides.
struct HeadRows {
  int64_t q, k, kr, v, lse;  // element offsets into q/dq, k/dk, kr/dkr, v/out/dout/dv, lse
  int64_t ldq, ldk, ldv;     // row strides of q, k, v (kr rows are dr apart)
};

inline HeadRows head_rows(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t dqt = s.dqk + s.dr, row0 = b * s.T * s.H + h;
  return {.q = row0 * dqt,
          .k = row0 * s.dqk,
          .kr = b * s.T * s.dr,
          .v = row0 * s.dv,
          .lse = (b * s.H + h) * s.T,
          .ldq = s.H * dqt,
          .ldk = s.H * s.dqk,
          .ldv = s.H * s.dv};
}

// Throws k3::Error naming the kernel and the bad field.
void check_shape(const char* kernel, const AttentionShape& s, const float* kr);

}  // namespace k3::kernels::attn
