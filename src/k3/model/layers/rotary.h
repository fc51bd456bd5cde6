// Rotary position embeddings as the attention layers apply them (kernels/rope.h, math §4.1): the
// config's frequencies (rope_theta, Llama 3's rope_scaling) over a head's d rotated values, and
// the position of every token a layer holds. A default-constructed Rotary is NoPE: it does nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/kernels/rope.h"
#include "k3/model/config.h"
#include "k3/model/layers/mixer.h"

namespace k3::model {

class Rotary {
 public:
  Rotary() = default;
  // d: the rotated values of a head (head_dim, or MLA's qk_rope_head_dim). NoPE when c says so.
  Rotary(const ModelConfig& c, int64_t d);
  bool on() const { return !freqs_.empty(); }

  // The positions of seq's tokens on this rank, [B·T] in the arena: each row's from 0, with packed
  // documents each document's from 0, and under context parallelism (the zig-zag layout,
  // context/zigzag.h) the positions the rank's two chunks hold in the whole sequence.
  const int64_t* positions(const Step& s, const Sequences& seq) const;

  // In place over l (rows of heads), row r at positions[r]; backward turns a gradient back.
  void forward(const kernels::RopeLayout& l, const int64_t* positions, float* x) const;
  void backward(const kernels::RopeLayout& l, const int64_t* positions, float* dx) const;

 private:
  std::vector<double> freqs_;
};

}  // namespace k3::model
