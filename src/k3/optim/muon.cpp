#include "k3/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"

namespace k3::optim {
namespace {

// A chunk's Nesterov inputs plus results stay under this size; larger groups run in chunks.
constexpr int64_t kChunkBytes = int64_t{256} << 20;
constexpr int64_t kTile = 32;

// Calls f(i, p) for the elements of rows [r0, r1) of a [rows, cols] block: i indexes the block,
// p the same element in the block's wide orientation ([cols, rows] when transposed). Tiled so a
// transposed walk stays within cache lines.
template <typename F>
void for_rows(int64_t r0, int64_t r1, int64_t rows, int64_t cols, bool transposed, F f) {
  if (!transposed) {
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) f(i, i);
    return;
  }
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const int64_t c1 = std::min(cols, c0 + kTile);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) f(r * cols + c, c * rows + r);
  }
}

}  // namespace

Muon::Muon(ParamSet params, std::vector<int64_t> block_rows, MuonConfig config)
    : params_(std::move(params)), config_(config), momentum_(params_.slots), ns_(config.ns_steps) {
  K3_CHECK(block_rows.size() == params_.slots.size(), "muon: ", block_rows.size(),
           " block sizes for ", params_.slots.size(), " parameters");
  for (size_t i = 0; i < params_.slots.size(); ++i) {
    const ParamSlot& p = params_.slots[i];
    K3_CHECK_CTX(p.shape.size() >= 2 && p.numel() > 0, (ErrorContext{"", p.name, -1}),
                 "muon needs a matrix, got shape ", shape_str(p.shape));
    const int64_t cols = p.shape.back(), rows = p.numel() / cols;
    const int64_t r = block_rows[i] > 0 ? block_rows[i] : rows;
    K3_CHECK_CTX(rows % r == 0, (ErrorContext{"", p.name, -1}), "blocks of ", r,
                 " rows do not tile its ", rows, " rows");
    auto it = std::find_if(groups_.begin(), groups_.end(),
                           [&](const ShapeGroup& g) { return g.rows == r && g.cols == cols; });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), ShapeGroup{r, cols, {}});
    for (int64_t b = 0; b < rows / r; ++b) {
      const size_t at = static_cast<size_t>(b * r * cols);
      it->blocks.push_back({params_.values + p.offset + at, params_.grads + p.offset + at,
                            momentum_.at(i) + at});
    }
  }
}

void Muon::step(float lr, float grad_scale) {
  for (const ShapeGroup& g : groups_) {
    const int64_t per_block = 2 * g.rows * g.cols * static_cast<int64_t>(sizeof(float));
    const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, kChunkBytes / per_block));
    for (size_t first = 0; first < g.blocks.size(); first += chunk)
      step_chunk(g, first, std::min(chunk, g.blocks.size() - first), lr, grad_scale);
  }
}

void Muon::step_chunk(const ShapeGroup& g, size_t first, size_t count, float lr, float grad_scale) {
  const int64_t rows = g.rows, cols = g.cols, size = rows * cols, n = static_cast<int64_t>(count);
  const bool transposed = rows > cols;  // Newton-Schulz works on the wide orientation
  if (pack_.numel() < n * size) {
    pack_ = Tensor::empty({n * size});
    out_ = Tensor::empty({n * size});
  }
  float *pack = pack_.f32(), *out = out_.f32();
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const float mu = config_.momentum;

  // M ← μM + G; V = G + μM, written into the chunk in the wide orientation.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < n; ++b)
    for (int64_t t = 0; t < row_tiles; ++t) {
      const Block& blk = g.blocks[first + static_cast<size_t>(b)];
      float* v = pack + b * size;
      for_rows(t * kTile, std::min(rows, (t + 1) * kTile), rows, cols, transposed,
               [&](int64_t i, int64_t p) {
                 const float grad = blk.g[i] * grad_scale, m = mu * blk.m[i] + grad;
                 blk.m[i] = m;
                 v[p] = grad + mu * m;
               });
    }

  if (transposed)
    ns_.run(pack, out, n, cols, rows);
  else
    ns_.run(pack, out, n, rows, cols);

  // W ← W − lr (0.2·√max(r, c)·X + λW)
  const float scale = 0.2f * std::sqrt(static_cast<float>(std::max(rows, cols))),
              wd = config_.weight_decay;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < n; ++b)
    for (int64_t t = 0; t < row_tiles; ++t) {
      float* w = g.blocks[first + static_cast<size_t>(b)].w;
      const float* x = out + b * size;
      for_rows(t * kTile, std::min(rows, (t + 1) * kTile), rows, cols, transposed,
               [&](int64_t i, int64_t p) { w[i] -= lr * (scale * x[p] + wd * w[i]); });
    }
}

std::vector<std::pair<std::string, Tensor>> Muon::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.slots.size(); ++i)
    out.emplace_back("momentum." + params_.slots[i].name, momentum_.view(i, params_.slots[i]));
  return out;
}

}  // namespace k3::optim
