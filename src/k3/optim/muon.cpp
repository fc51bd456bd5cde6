#include "k3/optim/muon.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "k3/base/error.h"

namespace k3::optim {
namespace {

// A batch's Nesterov inputs plus results stay under this size; larger groups run in batches.
constexpr int64_t kBatchBytes = int64_t{256} << 20;
constexpr int64_t kWalkTile = 32;

// How a [rows, cols] block is walked: its element (r, c) has index i = r·cols + c row-major, s
// in column panels `panel` wide (s = i when panel = cols), p in the wide orientation ([cols,
// rows] when transposed).
struct Walk {
  int64_t rows, cols, panel;
  bool transposed;
  bool plain() const { return !transposed && panel == cols; }
};

// Calls f(i, s, p) for the elements of rows [r0, r1). Tiled so a transposed walk stays within
// cache lines.
template <typename F>
void for_rows(int64_t r0, int64_t r1, const Walk& w, F f) {
  if (w.plain()) {
    for (int64_t i = r0 * w.cols; i < r1 * w.cols; ++i) f(i, i, i);
    return;
  }
  for (int64_t c0 = 0; c0 < w.cols; c0 += kWalkTile) {
    const int64_t c1 = std::min(w.cols, c0 + kWalkTile);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t i = r * w.cols + c;
        const int64_t s =
            w.panel == w.cols ? i : (c / w.panel) * w.rows * w.panel + r * w.panel + c % w.panel;
        f(i, s, w.transposed ? c * w.rows + r : i);
      }
  }
}

// f(b, i, s, p) for every element of `count` blocks, in parallel over row tiles.
template <typename F>
void for_blocks(int64_t count, const Walk& w, F f) {
  const int64_t row_tiles = (w.rows + kWalkTile - 1) / kWalkTile;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < count; ++b)
    for (int64_t t = 0; t < row_tiles; ++t)
      for_rows(t * kWalkTile, std::min(w.rows, (t + 1) * kWalkTile), w,
               [&](int64_t i, int64_t s, int64_t p) { f(b, i, s, p); });
}

}  // namespace

MuonGeometry muon_geometry(const std::string& name, const Shape& shape, int64_t block_rows) {
  const ErrorContext where{"", name, -1};
  K3_CHECK_CTX(shape.size() >= 2 && shape_numel(shape) > 0, where,
               "muon needs a matrix, got shape ", shape_str(shape));
  const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
  const int64_t r = block_rows > 0 ? block_rows : rows;
  K3_CHECK_CTX(rows % r == 0, where, "blocks of ", r, " rows do not tile its ", rows, " rows");
  return {rows, cols, r};
}

void check_block_sizes(const ParamSet& params, const std::vector<int64_t>& block_rows) {
  K3_CHECK(block_rows.size() == params.slots.size(), "muon: ", block_rows.size(),
           " block sizes for ", params.slots.size(), " parameters");
}

std::vector<MuonBlock> muon_blocks(const ParamSet& params, const std::vector<int64_t>& block_rows) {
  check_block_sizes(params, block_rows);
  std::vector<MuonBlock> blocks;
  for (size_t i = 0; i < params.slots.size(); ++i) {
    const ParamSlot& p = params.slots[i];
    const auto [rows, cols, r] = muon_geometry(p.name, p.shape, block_rows[i]);
    for (int64_t b = 0; b < rows / r; ++b)
      blocks.push_back({i, p.offset + static_cast<size_t>(b * r * cols), r, cols});
  }
  return blocks;
}

std::vector<MuonShapeGroup> group_by_shape(std::span<const MuonBlock> blocks) {
  std::vector<MuonShapeGroup> groups;
  for (size_t b = 0; b < blocks.size(); ++b) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const MuonShapeGroup& g) {
      return g.rows == blocks[b].rows && g.cols == blocks[b].cols;
    });
    if (it == groups.end())
      it = groups.insert(groups.end(), MuonShapeGroup{blocks[b].rows, blocks[b].cols, {}});
    it->blocks.push_back(b);
  }
  return groups;
}

size_t muon_batch_blocks(int64_t rows, int64_t cols) {
  const int64_t per_block = 2 * rows * cols * static_cast<int64_t>(sizeof(float));
  return static_cast<size_t>(std::max<int64_t>(1, kBatchBytes / per_block));
}

float muon_update_scale(int64_t rows, int64_t cols) {
  return 0.2f * std::sqrt(static_cast<float>(std::max(rows, cols)));
}

void muon_apply(float* w, const float* x, int64_t n, float lr, float scale, float weight_decay) {
#pragma omp parallel if (n > (1 << 15))
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * (scale * x[i] + weight_decay * w[i]);
}

MuonOrthogonalizer::MuonOrthogonalizer(float momentum, int ns_steps,
                                       kernels::Precision ns_precision)
    : momentum_(momentum), ns_(ns_steps, {}, ns_precision) {}

int64_t MuonOrthogonalizer::workspace_bytes() const {
  return static_cast<int64_t>(pack_.nbytes()) + ns_.workspace_bytes();
}

void MuonOrthogonalizer::run(int64_t rows, int64_t cols, std::span<const Input> blocks,
                             float grad_scale, float* x, int64_t panel_cols) {
  const int64_t size = rows * cols, n = static_cast<int64_t>(blocks.size());
  if (n == 0) return;
  // Newton-Schulz works on the wide orientation.
  const Walk walk{rows, cols, panel_cols > 0 ? panel_cols : cols, rows > cols};
  K3_CHECK(cols % walk.panel == 0, "muon: panels of ", walk.panel, " columns do not tile ", cols);
  if (pack_.numel() < n * size) pack_ = Tensor::empty({n * size});
  float* pack = pack_.f32();
  const float mu = momentum_;

  // M ← μM + G; V = G + μM, written into the batch in the wide orientation.
  for_blocks(n, walk, [&](int64_t b, int64_t i, int64_t s, int64_t p) {
    const Input& in = blocks[static_cast<size_t>(b)];
    const float grad = in.g[s] * grad_scale, m = mu * in.m[i] + grad;
    in.m[i] = m;
    pack[b * size + p] = grad + mu * m;
  });

  if (walk.transposed)
    ns_.run(pack, x, n, cols, rows);
  else
    ns_.run(pack, x, n, rows, cols);
  if (walk.plain()) return;
  // x holds X in the wide orientation and pack is scratch now: put X in place through it.
  for_blocks(n, walk, [&](int64_t b, int64_t, int64_t s, int64_t p) {
    pack[b * size + s] = x[b * size + p];
  });
  std::memcpy(x, pack, static_cast<size_t>(n * size) * sizeof(float));
}

Muon::Muon(ParamSet params, std::vector<int64_t> block_rows, MuonConfig config)
    : params_(std::move(params)),
      config_(config),
      momentum_(params_.slots),
      blocks_(muon_blocks(params_, block_rows)),
      groups_(group_by_shape(blocks_)),
      orthogonalizer_(config.momentum, config.ns_steps, config.ns_precision) {}

void Muon::step(float lr, float grad_scale) {
  std::vector<MuonOrthogonalizer::Input> inputs;
  for (const MuonShapeGroup& g : groups_) {
    const int64_t size = g.rows * g.cols;
    const size_t batch = muon_batch_blocks(g.rows, g.cols);
    const float scale = muon_update_scale(g.rows, g.cols);
    for (size_t first = 0; first < g.blocks.size(); first += batch) {
      const size_t count = std::min(batch, g.blocks.size() - first);
      inputs.clear();
      for (size_t k = first; k < first + count; ++k) {
        const MuonBlock& b = blocks_[g.blocks[k]];
        const size_t within = b.offset - params_.slots[b.slot].offset;
        inputs.push_back({params_.grads + b.offset, momentum_.at(b.slot) + within});
      }
      if (x_.numel() < static_cast<int64_t>(count) * size)
        x_ = Tensor::empty({static_cast<int64_t>(count) * size});
      orthogonalizer_.run(g.rows, g.cols, inputs, grad_scale, x_.f32());
      for (size_t k = 0; k < count; ++k)
        muon_apply(params_.values + blocks_[g.blocks[first + k]].offset,
                   x_.f32() + static_cast<int64_t>(k) * size, size, lr, scale,
                   config_.weight_decay);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> Muon::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.slots.size(); ++i)
    out.emplace_back("momentum." + params_.slots[i].name, momentum_.view(i, params_.slots[i]));
  return out;
}

}  // namespace k3::optim
