// Muon (math §7) over matrix parameters, each split into blocks of rows that are
// orthogonalized on their own: the whole matrix, one attention head's rows (Per-Head Muon), or
// one expert's matrix of a stacked [E, m, n] tensor. For each parameter W with gradient G:
//   M ← μM + G;  V = G + μM (Nesterov);  per block B of shape [r, c]:
//   X = NewtonSchulz(V_B) (on the wide orientation: transposed when r > c);
//   W_B ← W_B − lr (0.2·√max(r, c)·X + λ W_B).
// The 0.2·√max(r, c) factor gives X the update RMS of AdamW, so both share lr and λ.
// Blocks of equal shape — across heads, experts and layers — run as one batch.
//
// The pieces are public so that one process (Muon) and data parallelism (parallel/zero, where
// each block is orthogonalized by one rank and applied by the ranks that own its elements) run
// the same code: muon_blocks cuts the parameters into blocks, MuonOrthogonalizer turns a batch of
// gradients into X, muon_apply applies X to any range of a block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
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
  kernels::Precision ns_precision = kernels::Precision::F32;  // Newton–Schulz's products
};

// One orthogonalized block: rows × cols consecutive values of one parameter.
struct MuonBlock {
  size_t slot = 0;    // index into the ParamSet's slots
  size_t offset = 0;  // floats, into the flat buffers: the block's first element
  int64_t rows = 0, cols = 0;
  int64_t numel() const { return rows * cols; }
};

// A parameter of `shape` viewed as [rows, cols] (cols = last dimension), cut into blocks of
// block_rows rows (0: one block). Throws naming the parameter unless it is a matrix whose rows
// the blocks tile.
struct MuonGeometry {
  int64_t rows = 0, cols = 0, block_rows = 0;
};
MuonGeometry muon_geometry(const std::string& name, const Shape& shape, int64_t block_rows);
// Throws unless block_rows has one entry per slot.
void check_block_sizes(const ParamSet& params, const std::vector<int64_t>& block_rows);

// The blocks of every slot, slot by slot. block_rows[i] splits params.slots[i], viewed as
// [rows, cols] (cols = last dimension), into blocks of that many rows; 0 means one block. Every
// slot must be a matrix whose rows the blocks tile.
std::vector<MuonBlock> muon_blocks(const ParamSet& params, const std::vector<int64_t>& block_rows);

// Blocks of one shape, in the order their shapes first appear: the batches Newton–Schulz runs.
struct MuonShapeGroup {
  int64_t rows = 0, cols = 0;
  std::vector<size_t> blocks;  // indices into the block list
};
std::vector<MuonShapeGroup> group_by_shape(std::span<const MuonBlock> blocks);

// How many [rows, cols] blocks one batch holds: a batch's inputs and results stay under a fixed
// size, so larger groups run in several batches.
size_t muon_batch_blocks(int64_t rows, int64_t cols);

// W ← W − lr (scale·X + λW) over n elements; scale = 0.2·√max(r, c) of the block's shape.
float muon_update_scale(int64_t rows, int64_t cols);
void muon_apply(float* w, const float* x, int64_t n, float lr, float scale, float weight_decay);

// Momentum and Newton–Schulz for a batch of blocks of one shape [rows, cols]: for block b,
// M ← μM + s·G; V = s·G + μM; X_b = NewtonSchulz(V) in the block's own orientation at
// x + b·rows·cols (s: grad_scale). The workspace is kept between calls.
// G and X are row-major, or with panel_cols > 0 stored as column panels of that width, panel
// after panel, each row-major: the layout of a block whose columns are split over ranks, each
// rank's part one contiguous panel. M is always row-major.
class MuonOrthogonalizer {
 public:
  struct Input {
    const float* g;  // the block's gradient
    float* m;        // its momentum, updated in place
  };
  MuonOrthogonalizer(float momentum, int ns_steps,
                     kernels::Precision ns_precision = kernels::Precision::F32);
  void run(int64_t rows, int64_t cols, std::span<const Input> blocks, float grad_scale, float* x,
           int64_t panel_cols = 0);
  int64_t workspace_bytes() const;

 private:
  float momentum_;
  NewtonSchulz ns_;
  Tensor pack_;  // the batch's Nesterov inputs in the wide orientation
};

class Muon {
 public:
  // block_rows as for muon_blocks.
  Muon(ParamSet params, std::vector<int64_t> block_rows, MuonConfig config);

  // One step at learning rate lr; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale);

  // Optimizer state for checkpoints: "momentum.<name>" views.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;

 private:
  ParamSet params_;
  MuonConfig config_;
  PackedState momentum_;  // every slot's M
  std::vector<MuonBlock> blocks_;
  std::vector<MuonShapeGroup> groups_;
  MuonOrthogonalizer orthogonalizer_;
  Tensor x_;  // one batch's results
};

}  // namespace k3::optim
