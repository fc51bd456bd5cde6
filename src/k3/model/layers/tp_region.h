// The two ends of a tensor-parallel region, over the Step's tp group (docs/tensor_parallel.md).
//
// Inside a region every tp rank holds all `tokens` rows of the micro-batch and its own part of a
// layer: its heads, or its slice of an intermediate dimension. Column-parallel linears there read
// whole rows and write this rank's features; row-parallel ones write partial sums. Outside, the
// residual stream is either replicated (every rank holds every token) or, under sequence
// parallelism, split by tokens: rank r holds rows [r·tokens/tp, (r+1)·tokens/tp).
//
//            forward                                 backward
//   enter    SP: all-gather the tokens               the input gradient is a partial sum (each
//            replicated: nothing                     rank's heads): all-reduce it, or under SP
//                                                    reduce-scatter it to this rank's tokens
//   leave    the output is a partial sum (each       SP: all-gather the output gradient
//            rank's heads): all-reduce it, or under  replicated: nothing
//            SP reduce-scatter it
//
// So a region costs one collective at each end in each direction, however many column and row
// layers it holds. With tp of size 1 every end is nothing at all: the single-process arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/model/step.h"

namespace k3::model {

// The rows of a micro-batch of `tokens` tokens this rank holds outside regions.
int64_t local_rows(const Step& s, int64_t tokens);

class TpRegion {
 public:
  // A region over `tokens` rows of `width` floats (the residual stream's width).
  TpRegion(const Step& s, int64_t tokens, int64_t width);

  int64_t tokens() const { return tokens_; }
  int64_t rows() const { return rows_; }  // this rank's rows outside the region

  // Forward entry: x [rows, width] -> all tokens [tokens, width] (x itself unless gathered).
  const float* enter(const float* x) const;
  // The partial sum of the region's output, [tokens, width]: `out` itself when it holds all
  // tokens, else scratch in the arena. leave() turns it into out [rows, width].
  float* partial(float* out) const;
  void leave(float* partial, float* out) const;

  // Backward of leave: dout [rows, width] -> [tokens, width] (dout itself unless gathered).
  const float* leave_backward(const float* dout) const;
  // Backward of enter: the partial input gradient [tokens, width] (from partial(dx)) -> dx.
  void enter_backward(float* partial, float* dx) const { leave(partial, dx); }

  // This rank's rows of a buffer of all tokens.
  float* local(float* all) const { return all + offset_; }
  const float* local(const float* all) const { return all + offset_; }

 private:
  const float* gather(const float* x) const;
  std::vector<int64_t> counts() const;  // each rank's floats outside the region

  const Step& s_;
  int64_t tokens_, width_, rows_, offset_;
  bool split_;  // sequence parallel with more than one rank
};

}  // namespace k3::model
