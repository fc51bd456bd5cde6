#include "k3/model/layers/rotary.h"

#include <algorithm>

namespace k3::model {

Rotary::Rotary(const ModelConfig& c, int64_t d) {
  if (!c.rope()) return;
  kernels::RopeScaling scaling;
  if (c.rope_scaling_type == "llama3")
    scaling = {c.rope_scaling_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
               c.rope_original_max_position_embeddings};
  freqs_ = kernels::rope_frequencies(d, c.rope_theta, scaling);
}

const int64_t* Rotary::positions(const Step& s, const Sequences& seq) const {
  const int64_t cp = s.grid.cp().size(), rank = s.grid.cp().rank(), half = seq.T / 2;
  int64_t* p = s.arena.allocate_array<int64_t>(static_cast<size_t>(seq.B * seq.T));
  for (int64_t b = 0; b < seq.B; ++b)
    for (int64_t t = 0; t < seq.T; ++t) {
      // Under cp the rank holds chunks rank and 2·cp − 1 − rank of each sequence's 2·cp.
      const int64_t chunk = t < half ? rank : 2 * cp - 1 - rank;
      p[b * seq.T + t] = cp == 1 ? t : chunk * half + t % half;
    }
  if (!seq.doc_starts.empty())  // one row: from the start of each token's document
    for (int64_t t = 0; t < seq.T; ++t) {
      const auto after = std::upper_bound(seq.doc_starts.begin(), seq.doc_starts.end(), p[t]);
      if (after != seq.doc_starts.begin()) p[t] -= *(after - 1);
    }
  return p;
}

void Rotary::forward(const kernels::RopeLayout& l, const int64_t* positions, float* x) const {
  if (on()) kernels::rope_forward(l, freqs_.data(), positions, x);
}

void Rotary::backward(const kernels::RopeLayout& l, const int64_t* positions, float* dx) const {
  if (on()) kernels::rope_backward(l, freqs_.data(), positions, dx);
}

}  // namespace k3::model
