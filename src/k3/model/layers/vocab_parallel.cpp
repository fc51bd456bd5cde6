#include "k3/model/layers/vocab_parallel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "k3/kernels/gemm.h"
#include "k3/model/layers/tp_region.h"

namespace k3::model {

VocabEmbedding::VocabEmbedding(ParamRegistry& reg, const std::string& name, int64_t vocab,
                               int64_t hidden, float std)
    : w_(reg.add(name, {vocab, hidden}, ParamInit::normal(std), {0, "tp"})),
      vocab_(vocab),
      hidden_(hidden),
      shard_{reg.info(w_).shard_start, reg.info(w_).local_shape[0]} {}

void VocabEmbedding::forward(const Step& s, const int32_t* tokens, int64_t n, float* out) const {
  const TpRegion region(s, n, hidden_);
  ArenaScope scratch(s.arena);
  float* partial = region.partial(out);
  kernels::embedding_forward(tokens, n, s.params.value(w_).f32(), vocab_, hidden_, partial, shard_);
  region.leave(partial, out);
}

void VocabEmbedding::backward(const Step& s, const int32_t* tokens, int64_t n,
                              const float* dout) const {
  const TpRegion region(s, n, hidden_);
  ArenaScope scratch(s.arena);
  kernels::embedding_backward(tokens, n, region.leave_backward(dout), vocab_, hidden_,
                              s.params.grad(w_).f32(), shard_);
}

LmHead::LmHead(ParamRegistry& reg, const std::string& name, int64_t vocab, int64_t hidden,
               float std)
    : w_(reg.add(name, {vocab, hidden}, ParamInit::normal(std), {0, "tp"})),
      vocab_(vocab),
      hidden_(hidden),
      range_{reg.info(w_).shard_start, reg.info(w_).local_shape[0], vocab} {}

int64_t LmHead::chunk_rows(int64_t vocab_columns) {
  // Chunks of 1024 rows measured as fast as the unfused path (bench_lm_head), smaller ones a few
  // percent slower.
  return std::clamp<int64_t>((int64_t{32} << 20) / vocab_columns, 64, 1024);
}

kernels::LossSum LmHead::loss(const Step& s, const float* h, const int32_t* targets, int64_t n,
                              int32_t ignore_index, float grad_scale, float* dh) const {
  if (s.grid.tp().size() > 1) return sharded_loss(s, h, targets, n, ignore_index, grad_scale, dh);
  ArenaScope scratch(s.arena);
  const int64_t chunk = chunk_rows(vocab_);
  kernels::LmHeadCeArgs ce{h,
                           s.params.value(w_).f32(),
                           targets,
                           n,
                           hidden_,
                           vocab_,
                           ignore_index,
                           grad_scale,
                           chunk,
                           s.alloc(chunk * vocab_),
                           dh,
                           dh ? s.params.grad(w_).f32() : nullptr};
  return kernels::lm_head_cross_entropy(ce);
}

// Per chunk: this rank's logits, their statistics gathered from every rank, the loss and this
// rank's part of the gradient. Every rank combines the same statistics in the same order, so
// every rank returns the same loss.
kernels::LossSum LmHead::sharded_loss(const Step& s, const float* h, const int32_t* targets,
                                      int64_t n, int32_t ignore_index, float grad_scale,
                                      float* dh) const {
  const dist::Comm& tp = s.grid.tp();
  const TpRegion region(s, n, hidden_);
  ArenaScope scratch(s.arena);
  const float* ha = region.enter(h);
  float* partial = dh ? region.partial(dh) : nullptr;
  const int64_t V = range_.size, chunk = chunk_rows(V);
  const float* w = s.params.value(w_).f32();
  const uint16_t* w_bf16 = s.weight_bf16(w_);
  float *logits = s.alloc(chunk * V), *stats = s.alloc(tp.size() * chunk * kernels::kCeStats);
  float* norm = s.alloc(chunk * 2);
  kernels::LossSum total;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t rows = std::min(chunk, n - c0);
    const float* hc = ha + c0 * hidden_;
    const int32_t* tc = targets + c0;
    kernels::gemm({false, true, rows, V, hidden_, 1.f, hc, hidden_, w, hidden_, 0.f, logits, V,
                   s.precision, nullptr, w_bf16});
    kernels::ce_shard_stats(logits, tc, rows, range_, ignore_index,
                            stats + tp.rank() * rows * kernels::kCeStats);
    tp.all_gather(stats,
                  std::vector<int64_t>(static_cast<size_t>(tp.size()), rows * kernels::kCeStats));
    const kernels::LossSum part =
        kernels::ce_combine(stats, tp.size(), tc, rows, ignore_index, norm);
    total.sum += part.sum;
    total.count += part.count;
    if (!partial) continue;
    kernels::ce_shard_grad(logits, tc, rows, range_, norm, ignore_index, grad_scale);
    kernels::gemm({false, false, rows, hidden_, V, 1.f, logits, V, w, hidden_, 0.f,
                   partial + c0 * hidden_, hidden_, s.precision, nullptr, w_bf16});
    kernels::gemm(true, false, V, hidden_, rows, 1.f, logits, hc, 1.f, s.params.grad(w_).f32(),
                  s.precision);
  }
  if (partial) region.enter_backward(partial, dh);
  return total;
}

void LmHead::logits(const Step& s, const float* h, int64_t rows, float* out) const {
  const dist::Comm& tp = s.grid.tp();
  const int64_t V = range_.size;
  if (tp.size() == 1) {
    kernels::gemm({false, true, rows, vocab_, hidden_, 1.f, h, hidden_, s.params.value(w_).f32(),
                   hidden_, 0.f, out, vocab_, s.precision, nullptr, s.weight_bf16(w_)});
    return;
  }
  ArenaScope scratch(s.arena);
  float* blocks = s.alloc(rows * vocab_);  // [tp][rows][V]: each rank's columns, gathered
  kernels::gemm({false, true, rows, V, hidden_, 1.f, h, hidden_, s.params.value(w_).f32(), hidden_,
                 0.f, blocks + tp.rank() * rows * V, V, s.precision, nullptr, s.weight_bf16(w_)});
  tp.all_gather(blocks, std::vector<int64_t>(static_cast<size_t>(tp.size()), rows * V));
  for (int64_t k = 0; k < tp.size(); ++k)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out + r * vocab_ + k * V, blocks + (k * rows + r) * V,
                  static_cast<size_t>(V) * sizeof(float));
}

}  // namespace k3::model
