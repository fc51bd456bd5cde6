#include "k3/parallel/zero/distributed_muon.h"

#include <algorithm>
#include <numeric>

#include "k3/base/error.h"

namespace k3::parallel {
namespace {

// Tags of the two exchanges. Messages between two ranks under one tag match in the order they
// are posted, and both ends post them in block order, piece by piece.
constexpr int kGradientTag = 1, kValueTag = 2;

// Multiply-adds of Newton–Schulz on one block, step by step (A = XXᵀ, A², (bA + cA²)X).
double ns_cost(const optim::MuonBlock& b, int ns_steps) {
  const double m = static_cast<double>(std::min(b.rows, b.cols)),
               n = static_cast<double>(std::max(b.rows, b.cols));
  return ns_steps * (2 * m * m * n + m * m * m);
}

int64_t bytes_moved(const dist::Comm& c) {
  return c.counters()[dist::Op::send].bytes + c.counters()[dist::Op::recv].bytes;
}

FlatRange range_of(const optim::MuonBlock& b) {
  return {b.offset, b.offset + static_cast<size_t>(b.numel())};
}

// The blocks grouped by shape: owners then batch each shape's blocks in this order.
std::vector<optim::MuonBlock> blocks_by_shape(const optim::ParamSet& params,
                                              const std::vector<int64_t>& block_rows) {
  const auto blocks = optim::muon_blocks(params, block_rows);
  std::vector<optim::MuonBlock> ordered;
  for (const optim::MuonShapeGroup& g : optim::group_by_shape(blocks))
    for (size_t b : g.blocks) ordered.push_back(blocks[b]);
  return ordered;
}

}  // namespace

std::vector<int> assign_block_owners(std::span<const optim::MuonBlock> blocks, int ranks,
                                     int ns_steps) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ns_cost(blocks[a], ns_steps) > ns_cost(blocks[b], ns_steps);
  });
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  std::vector<int> owners(blocks.size(), 0);
  for (size_t b : order) {
    const auto least = std::min_element(load.begin(), load.end());
    owners[b] = static_cast<int>(least - load.begin());
    *least += ns_cost(blocks[b], ns_steps);
  }
  return owners;
}

int64_t muon_p2p_bytes(const ShardLayout& layout, std::span<const optim::MuonBlock> blocks,
                       std::span<const int> owners, int zero_stage, int rank) {
  const int64_t directions = zero_stage == 2 ? 2 : 1;
  int64_t bytes = 0;
  for (size_t b = 0; b < blocks.size(); ++b)
    layout.for_each_owner(range_of(blocks[b]), [&](int holder, FlatRange piece) {
      if (holder != owners[b] && (holder == rank || owners[b] == rank))
        bytes += directions * static_cast<int64_t>(piece.size() * sizeof(float));
    });
  return bytes;
}

DistributedMuon::DistributedMuon(optim::ParamSet params, const std::vector<int64_t>& block_rows,
                                 optim::MuonConfig config, const ShardLayout& layout,
                                 dist::Comm dp, int zero_stage)
    : params_(std::move(params)),
      config_(config),
      layout_(layout),
      dp_(std::move(dp)),
      zero_stage_(zero_stage),
      blocks_(blocks_by_shape(params_, block_rows)),
      owners_(assign_block_owners(blocks_, layout.ranks(), config.ns_steps)),
      orthogonalizer_(config.momentum, config.ns_steps) {
  K3_CHECK(zero_stage == 1 || zero_stage == 2, "distributed Muon runs under ZeRO 1 or 2, not ",
           zero_stage);
  int64_t owned = 0, total = 0;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    std::vector<Piece>& pieces = pieces_.emplace_back();
    layout_.for_each_owner(range_of(blocks_[b]),
                           [&](int rank, FlatRange piece) { pieces.push_back({rank, piece}); });
    const bool mine = owners_[b] == layout_.rank();
    momentum_at_.push_back(mine ? owned : -1);
    if (mine) owned += blocks_[b].numel();
    total += blocks_[b].numel();
  }
  momentum_ = Tensor::zeros({owned});
  traffic_.all_gather_bytes = total * static_cast<int64_t>(sizeof(float));
}

float* DistributedMuon::momentum(size_t b) const {
  return momentum_at_[b] < 0 ? nullptr : momentum_.f32() + momentum_at_[b];
}

int64_t DistributedMuon::expected_p2p_bytes() const {
  return muon_p2p_bytes(layout_, blocks_, owners_, zero_stage_, layout_.rank());
}

void DistributedMuon::start() {
  const int me = layout_.rank();
  bytes_before_ = bytes_moved(dp_);
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const int owner = owners_[b];
    for (const Piece& p : pieces_[b]) {
      const auto n = static_cast<int64_t>(p.range.size());
      float* grad = params_.grads + p.range.begin;
      if (owner == me && p.rank != me && zero_stage_ == 2)
        gradient_requests_.push_back(dp_.recv_async(grad, n, p.rank, kGradientTag));
      if (owner != me && p.rank == me) {
        if (zero_stage_ == 2)
          gradient_requests_.push_back(dp_.send_async(grad, n, owner, kGradientTag));
        value_requests_.push_back(
            dp_.recv_async(params_.values + p.range.begin, n, owner, kValueTag));
      }
    }
  }
}

void DistributedMuon::finish(float lr, float grad_scale) {
  const int me = layout_.rank();
  dist::wait_all(gradient_requests_);
  gradient_requests_.clear();

  // This rank's blocks, in runs of one shape up to a batch: orthogonalize, update the whole
  // blocks, send every other rank its slices.
  std::vector<optim::MuonOrthogonalizer::Input> inputs;
  std::vector<size_t> run;
  std::vector<dist::Request> sends;
  for (size_t first = 0; first < blocks_.size();) {
    if (owners_[first] != me) {
      ++first;
      continue;
    }
    const int64_t rows = blocks_[first].rows, cols = blocks_[first].cols, size = rows * cols;
    const size_t batch = optim::muon_batch_blocks(rows, cols);
    run.clear();
    for (size_t b = first; b < blocks_.size() && run.size() < batch; ++b) {
      if (blocks_[b].rows != rows || blocks_[b].cols != cols) break;
      if (owners_[b] == me) run.push_back(b);
      first = b + 1;
    }
    inputs.clear();
    for (size_t b : run) inputs.push_back({params_.grads + blocks_[b].offset, momentum(b)});
    const auto count = static_cast<int64_t>(run.size());
    if (x_.numel() < count * size) x_ = Tensor::empty({count * size});
    orthogonalizer_.run(rows, cols, inputs, grad_scale, x_.f32());
    const float scale = optim::muon_update_scale(rows, cols);
    for (int64_t k = 0; k < count; ++k) {
      const size_t b = run[static_cast<size_t>(k)];
      optim::muon_apply(params_.values + blocks_[b].offset, x_.f32() + k * size, size, lr, scale,
                        config_.weight_decay);
      for (const Piece& p : pieces_[b])
        if (p.rank != me)
          sends.push_back(dp_.send_async(params_.values + p.range.begin,
                                         static_cast<int64_t>(p.range.size()), p.rank, kValueTag));
    }
  }
  dist::wait_all(value_requests_);
  value_requests_.clear();
  dist::wait_all(sends);
  traffic_.p2p_bytes = bytes_moved(dp_) - bytes_before_;
  traffic_.x_buffer_bytes = static_cast<int64_t>(x_.nbytes());
  traffic_.workspace_bytes = orthogonalizer_.workspace_bytes();
}

}  // namespace k3::parallel
