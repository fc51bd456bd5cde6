#include "k3/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "k3/base/error.h"
#include "k3/kernels/fast_math.h"
#include "k3/kernels/gemm.h"

namespace k3::kernels {

// One row in place: logits become (softmax - onehot) * grad_scale; returns -log p(target).
static double row_forward_backward(float* x, int32_t target, int64_t V, float grad_scale) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j]);
  const float x_target = x[target];
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; ++j) {
    x[j] = fast::exp(x[j] - mx);
    sum += x[j];
  }
  const float scale = grad_scale / sum;
#pragma omp simd
  for (int64_t j = 0; j < V; ++j) x[j] *= scale;
  x[target] -= grad_scale;
  return static_cast<double>(mx) + std::log(static_cast<double>(sum)) - x_target;
}

// Counts the tokens that are not ignored; throws on a target outside the vocabulary. Run before
// any work, as an exception must not escape an OpenMP region.
static int64_t count_targets(const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index) {
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] == ignore_index) continue;
    K3_CHECK(targets[i] >= 0 && targets[i] < V, "cross_entropy: target ", targets[i], " of row ", i,
             " is outside [0, ", V, ") and is not ignore_index ", ignore_index);
    ++count;
  }
  return count;
}

LossSum cross_entropy_forward_backward(float* logits, const int32_t* targets, int64_t N, int64_t V,
                                       int32_t ignore_index, float grad_scale) {
  K3_CHECK(N >= 0 && V > 0, "cross_entropy: bad shape N=", N, " V=", V);
  LossSum out;
  out.count = count_targets(targets, N, V, ignore_index);
  // Per-row losses summed afterwards in row order: the same sum for any thread count.
  std::vector<double> loss(static_cast<size_t>(N), 0.0);
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * V;
    if (targets[i] == ignore_index)
      std::fill(x, x + V, 0.0f);
    else
      loss[i] = row_forward_backward(x, targets[i], V, grad_scale);
  }
  for (double l : loss) out.sum += l;
  return out;
}

LossSum lm_head_cross_entropy(const LmHeadCeArgs& a) {
  K3_CHECK(a.N >= 0 && a.d > 0 && a.V > 0 && a.chunk > 0,
           "lm_head_cross_entropy: bad sizes N=", a.N, " d=", a.d, " V=", a.V, " chunk=", a.chunk);
  K3_CHECK(a.h && a.w && a.targets && a.workspace,
           "lm_head_cross_entropy: null input or workspace");
  count_targets(a.targets, a.N, a.V, a.ignore_index);  // before dW is touched
  LossSum total;
  for (int64_t c0 = 0; c0 < a.N; c0 += a.chunk) {
    const int64_t n = std::min(a.chunk, a.N - c0);
    const float* h = a.h + c0 * a.d;
    float* logits = a.workspace;
    gemm(false, true, n, a.V, a.d, 1.0f, h, a.w, 0.0f, logits);  // h Wᵀ
    const LossSum part = cross_entropy_forward_backward(logits, a.targets + c0, n, a.V,
                                                        a.ignore_index, a.grad_scale);
    total.sum += part.sum;
    total.count += part.count;
    if (a.dh) gemm(false, false, n, a.d, a.V, 1.0f, logits, a.w, 0.0f, a.dh + c0 * a.d);
    if (a.dw) gemm(true, false, a.V, a.d, n, 1.0f, logits, h, 1.0f, a.dw);
  }
  return total;
}

void ce_shard_stats(const float* logits, const int32_t* targets, int64_t N, const VocabRange& r,
                    int32_t ignore_index, float* stats) {
  K3_CHECK(N >= 0 && r.size > 0 && r.first >= 0 && r.first + r.size <= r.vocab,
           "cross_entropy: bad shard [", r.first, ", ", r.first + r.size, ") of ", r.vocab);
  count_targets(targets, N, r.vocab, ignore_index);
#pragma omp parallel for schedule(static) if (N * r.size > 65536)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * r.size;
    float* st = stats + i * kCeStats;
    if (targets[i] == ignore_index) {
      st[0] = st[1] = st[2] = 0.f;
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < r.size; ++j) mx = std::max(mx, x[j]);
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < r.size; ++j) sum += fast::exp(x[j] - mx);
    const int64_t t = targets[i] - r.first;
    st[0] = mx;
    st[1] = sum;
    st[2] = t >= 0 && t < r.size ? x[t] : 0.f;
  }
}

LossSum ce_combine(const float* all_stats, int64_t shards, const int32_t* targets, int64_t N,
                   int32_t ignore_index, float* norm) {
  LossSum out;
  for (int64_t i = 0; i < N; ++i) {
    float* nm = norm + i * 2;
    if (targets[i] == ignore_index) {
      nm[0] = 0.f;
      nm[1] = 1.f;
      continue;
    }
    auto stat = [&](int64_t k) { return all_stats + (k * N + i) * kCeStats; };
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < shards; ++k) mx = std::max(mx, stat(k)[0]);
    float sum = 0, target = 0;
    for (int64_t k = 0; k < shards; ++k) {
      sum += stat(k)[1] * fast::exp(stat(k)[0] - mx);
      target += stat(k)[2];  // one shard holds the target, the others add 0
    }
    nm[0] = mx;
    nm[1] = sum;
    out.sum += static_cast<double>(mx) + std::log(static_cast<double>(sum)) - target;
    ++out.count;
  }
  return out;
}

void ce_shard_grad(float* logits, const int32_t* targets, int64_t N, const VocabRange& r,
                   const float* norm, int32_t ignore_index, float grad_scale) {
#pragma omp parallel for schedule(static) if (N * r.size > 65536)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * r.size;
    if (targets[i] == ignore_index) {
      std::fill(x, x + r.size, 0.0f);
      continue;
    }
    const float mx = norm[i * 2], scale = grad_scale / norm[i * 2 + 1];
#pragma omp simd
    for (int64_t j = 0; j < r.size; ++j) x[j] = fast::exp(x[j] - mx) * scale;
    const int64_t t = targets[i] - r.first;
    if (t >= 0 && t < r.size) x[t] -= grad_scale;
  }
}

}  // namespace k3::kernels
