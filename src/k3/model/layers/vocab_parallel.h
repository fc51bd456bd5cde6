// The token embedding and the LM head, their [vocab, hidden] tables split by vocabulary rows over
// tp (rank r holds rows [r·V/tp, (r+1)·V/tp)); with tp of size 1 they are the plain layers.
//   embedding  each rank looks up the tokens its rows hold (zeros for the others); the region's
//              end sums the ranks' rows (all-reduce, or reduce-scatter under sequence parallelism).
//   LM head    each rank computes the logits of its vocabulary rows only, and the loss through
//              the vocabulary-parallel cross-entropy (kernels/cross_entropy.h): per chunk of tokens
//              one all-gather of 3 floats per token and rank, never the [tokens, vocab] logits. The
//              hidden states' gradient is a partial sum over tp, summed at the region's end.
#pragma once

#include <cstdint>
#include <string>

#include "k3/kernels/cross_entropy.h"
#include "k3/kernels/embedding.h"
#include "k3/model/step.h"

namespace k3::model {

class VocabEmbedding {
 public:
  VocabEmbedding() = default;
  // Registers `name` [vocab, hidden], N(0, std²).
  VocabEmbedding(ParamRegistry& reg, const std::string& name, int64_t vocab, int64_t hidden,
                 float std);

  // tokens: all `n` of the micro-batch, on every rank; out: this rank's rows of [n, hidden].
  void forward(const Step& s, const int32_t* tokens, int64_t n, float* out) const;
  // dout: this rank's rows; the table's gradient accumulates (this rank's vocabulary rows).
  void backward(const Step& s, const int32_t* tokens, int64_t n, const float* dout) const;
  int weight() const { return w_; }

 private:
  int w_ = -1;
  int64_t vocab_ = 0, hidden_ = 0;
  kernels::VocabShard shard_;
};

class LmHead {
 public:
  LmHead() = default;
  LmHead(ParamRegistry& reg, const std::string& name, int64_t vocab, int64_t hidden, float std);

  // h: this rank's rows of [n, hidden]; targets: all n. Returns the summed loss; when dh (this
  // rank's rows) is given, writes the gradient of grad_scale · loss into it and accumulates the
  // weight's gradient.
  kernels::LossSum loss(const Step& s, const float* h, const int32_t* targets, int64_t n,
                        int32_t ignore_index, float grad_scale, float* dh) const;
  // The whole logits [rows, vocab] of rows h [rows, hidden] that every rank holds alike
  // (decoding, inspection): each rank's vocabulary columns, gathered.
  void logits(const Step& s, const float* h, int64_t rows, float* out) const;
  int weight() const { return w_; }

  // Rows of logits computed at a time: at most ~32M floats (128 MiB) of a shard's logits,
  // between 64 and 1024 rows.
  static int64_t chunk_rows(int64_t vocab_columns);

 private:
  kernels::LossSum sharded_loss(const Step& s, const float* h, const int32_t* targets, int64_t n,
                                int32_t ignore_index, float grad_scale, float* dh) const;

  int w_ = -1;
  int64_t vocab_ = 0, hidden_ = 0;
  kernels::VocabRange range_;
};

}  // namespace k3::model
