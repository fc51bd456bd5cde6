// Muon (math §7) over matrix parameters, each split into blocks of rows that are
// orthogonalized on their own: the whole matrix, one attention head's rows (Per-Head Muon), or
// one expert's matrix of a stacked [E, m, n] tensor. For each parameter W with gradient G:
//   M ← μM + G;  V = G + μM (Nesterov);  per block B of shape [r, c]:
//   X = NewtonSchulz(V_B) (on the wide orientation: transposed when r > c);
//   W_B ← W_B − lr (0.2·√max(r, c)·X + λ W_B).
// The 0.2·√max(r, c) factor gives X the update RMS of AdamW, so both share lr and λ.
// Blocks of equal shape — across heads, experts and layers — run as one batch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "k3/optim/newton_schulz.h"
#include "k3/optim/param_set.h"

namespace k3::optim {

struct MuonConfig {
  float momentum = 0.95f;
  float weight_decay = 0.1f;
  int ns_steps = 5;
};

class Muon {
 public:
  // block_rows[i] splits params.slots[i], viewed as [rows, cols] (cols = last dimension), into
  // blocks of that many rows; 0 means one block. Every slot must have at least two dimensions.
  Muon(ParamSet params, std::vector<int64_t> block_rows, MuonConfig config);

  // One step at learning rate lr; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale);

  // Optimizer state for checkpoints: "momentum.<name>" views.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;

 private:
  struct Block {
    float *w, *g, *m;  // the block's first element in values, gradients, momentum
  };
  struct ShapeGroup {
    int64_t rows = 0, cols = 0;
    std::vector<Block> blocks;
  };
  void step_chunk(const ShapeGroup& group, size_t first, size_t count, float lr, float grad_scale);

  ParamSet params_;
  MuonConfig config_;
  PackedState momentum_;            // every slot's M
  std::vector<ShapeGroup> groups_;  // in order of first appearance: deterministic
  NewtonSchulz ns_;
  Tensor pack_, out_;  // the chunk's Nesterov inputs (wide orientation) and orthogonalized result
};

}  // namespace k3::optim
