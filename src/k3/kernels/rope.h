// Rotary position embeddings (RoPE) in Hugging Face's convention, Llama's rotate_half: a head's d
// rotated values (d even) pair dimension i with i + d/2, and position p turns each pair by the
// angle a = p·f_i (math §4.1):
//   y_i = x_i cos a − x_{i+d/2} sin a,   y_{i+d/2} = x_{i+d/2} cos a + x_i sin a.
// The backward is the inverse rotation (the angle negated). Angles and their cosines are formed in
// double and rounded once: p·f in fp32 would lose the angle's low bits at long positions.
#pragma once

#include <cstdint>
#include <vector>

namespace k3::kernels {

// Llama 3's frequency scaling (rope_scaling "llama3"); factor 0 means none.
struct RopeScaling {
  double factor = 0, low_freq_factor = 0, high_freq_factor = 0;
  int64_t original_max_positions = 0;
};

// The d/2 frequencies f_i = θ^(−2i/d); with llama3 scaling those whose wavelength 2π/f exceeds
// original/low_freq_factor are divided by factor, those below original/high_freq_factor kept, and
// those between interpolated (smooth = (original/wavelength − low) / (high − low),
// f ← (1 − smooth)·f/factor + smooth·f).
std::vector<double> rope_frequencies(int64_t d, double theta, const RopeScaling& scaling = {});

// Where the rotated values lie: row r (r < rows) at x + r·ld_row holds `heads` heads, head h's d
// rotated values at h·ld_head from the row's start. Every head of a row turns by the row's
// position.
struct RopeLayout {
  int64_t rows = 0, heads = 1, d = 0, ld_row = 0, ld_head = 0;
};

// In place; freqs [d/2], positions [rows].
void rope_forward(const RopeLayout& l, const double* freqs, const int64_t* positions, float* x);
// The gradient through rope_forward, in place: dx = R(−p f) dy.
void rope_backward(const RopeLayout& l, const double* freqs, const int64_t* positions, float* dy);

}  // namespace k3::kernels
