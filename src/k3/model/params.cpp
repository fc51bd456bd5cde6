#include "k3/model/params.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/dist/grid.h"
#include "k3/tensor/bf16.h"

namespace k3::model {

GroupPlaces places_of(const dist::ProcessGrid& grid) {
  GroupPlaces out;
  for (const dist::Comm* g : grid.groups()) out[g->name()] = {g->size(), g->rank()};
  return out;
}

ShardRuns shard_runs(const ParamInfo& p) {
  if (p.shape.empty()) return {1, 1, 1, 0};  // a scalar
  if (!p.held()) return {0, 0, 0, 0};
  const size_t dim = p.shard.dim < 0 ? 0 : static_cast<size_t>(p.shard.dim);
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < p.shape.size(); ++k)
    if (k < dim)
      outer *= p.shape[k];
    else if (k > dim)
      inner *= p.shape[k];
  return {outer, p.local_shape[dim] * inner, p.shape[dim] * inner, p.shard_start * inner};
}

void copy_shard_from_global(const ParamInfo& p, const float* global, float* local) {
  const ShardRuns r = shard_runs(p);
  for (int64_t o = 0; o < r.runs; ++o)
    std::memcpy(local + o * r.length, global + o * r.stride + r.first,
                static_cast<size_t>(r.length) * sizeof(float));
}

void copy_shard_to_global(const ParamInfo& p, const float* local, float* global) {
  const ShardRuns r = shard_runs(p);
  for (int64_t o = 0; o < r.runs; ++o)
    std::memcpy(global + o * r.stride + r.first, local + o * r.length,
                static_cast<size_t>(r.length) * sizeof(float));
}

ParamRegistry::ParamRegistry(GroupPlaces places) : places_(std::move(places)) {
  for (const auto& [group, p] : places_)
    K3_CHECK(p.size > 0 && p.rank >= 0 && p.rank < p.size, "group ", group, ": rank ", p.rank,
             " of size ", p.size);
}

const GroupPlace& ParamRegistry::place(const std::string& group) const {
  static const GroupPlace alone;
  auto it = places_.find(group);
  return it == places_.end() ? alone : it->second;
}

ParamRegistry::~ParamRegistry() {
  unmap_buffer(values_, flat_size_ * sizeof(float));
  unmap_buffer(grads_, flat_size_ * sizeof(float));
  unmap_buffer(values_bf16_, flat_size_ * sizeof(uint16_t));
}

int ParamRegistry::add(std::string name, Shape shape, ParamInit init, ShardSpec shard) {
  K3_CHECK(!values_, "parameter '", name, "' registered after allocation");
  // Once indexed, each name goes into the table as it comes, which grows by placing every name
  // again, by its hash.
  const bool indexed = !by_name_.empty();
  if (indexed && 2 * (infos_.size() + 1) > by_name_.size()) {
    const std::vector<NameSlot> old =
        std::exchange(by_name_, std::vector<NameSlot>(2 * by_name_.size()));
    const size_t mask = by_name_.size() - 1;
    for (const NameSlot& e : old)
      if (e.index >= 0) {
        size_t i = e.hash & mask;
        while (by_name_[i].index >= 0) i = (i + 1) & mask;
        by_name_[i] = e;
      }
  }
  const size_t h = indexed ? std::hash<std::string>{}(name) : 0;
  NameSlot* slot = indexed ? &by_name_[name_slot(name, h)] : nullptr;
  K3_CHECK(!slot || slot->index < 0, "parameter '", name, "' registered twice");
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.init = std::move(init);
  p.shard = std::move(shard);
  p.local_shape = p.shape;
  if (p.shard.dim >= 0) {
    K3_CHECK(p.shard.dim < static_cast<int>(p.shape.size()), "parameter '", p.name, "' of shape ",
             shape_str(p.shape), " cannot be split along dimension ", p.shard.dim);
    const GroupPlace& g = place(p.shard.group);
    int64_t& extent = p.local_shape[static_cast<size_t>(p.shard.dim)];
    K3_CHECK(extent % g.size == 0, "parameter '", p.name, "' of shape ", shape_str(p.shape),
             ": dimension ", p.shard.dim, " does not split evenly over group ", p.shard.group,
             " of size ", g.size);
    extent /= g.size;
    p.shard_start = extent * g.rank;
  }
  if (p.shard.expert_owned()) {
    const GroupPlace& ep = place("ep");
    K3_CHECK(p.shard.ep_owner < ep.size && !p.shape.empty(), "parameter '", p.name,
             "' owned by ep rank ", p.shard.ep_owner, " of a group of size ", ep.size);
    if (ep.rank != p.shard.ep_owner) p.local_shape[0] = 0;
  }
  if (p.shard.pp_owner < 0) p.shard.pp_owner = pp_owner_;
  if (p.shard.pp_owner >= 0) {
    const GroupPlace& pp = place("pp");
    K3_CHECK(p.shard.pp_owner < pp.size && !p.shape.empty(), "parameter '", p.name,
             "' owned by pp rank ", p.shard.pp_owner, " of a group of size ", pp.size);
    if (pp.rank != p.shard.pp_owner) p.local_shape[0] = 0;
  }
  p.numel_ = shape_numel(p.shape);
  p.local_numel_ = shape_numel(p.local_shape);
  p.offset = flat_size_;
  flat_size_ +=
      (static_cast<size_t>(p.local_numel_) + 15) / 16 * 16;  // keep every tensor 64-byte aligned
  if (slot) *slot = {h, size()};
  infos_.push_back(std::move(p));
  return size() - 1;
}

void ParamRegistry::allocate() {
  K3_CHECK(!values_, "parameters allocated twice");
  index();
  values_ = static_cast<float*>(map_buffer(flat_size_ * sizeof(float)));
  grads_ = static_cast<float*>(map_buffer(flat_size_ * sizeof(float)));
  std::memset(values_, 0, flat_size_ * sizeof(float));
  zero_grads();
}

void ParamRegistry::initialize(uint64_t seed) {
  K3_CHECK(values_, "parameters initialized before allocation");
  for (const ParamInfo& p : infos_) {
    const ShardRuns r = shard_runs(p);
    const uint64_t stream = stream_of(p.name);
    for (int64_t o = 0; o < r.runs; ++o) {
      float* out = values_ + p.offset + o * r.length;
      const auto first = static_cast<uint64_t>(o * r.stride + r.first);
      const int64_t run = r.length;
      switch (p.init.kind) {
        case ParamInit::Kind::Normal:
          fill_normal(out, run, seed, stream, first, 0.f, p.init.std);
          break;
        case ParamInit::Kind::Zeros:
          std::fill(out, out + run, 0.f);
          break;
        case ParamInit::Kind::Ones:
          std::fill(out, out + run, 1.f);
          break;
        case ParamInit::Kind::Custom:
          p.init.fill(out, static_cast<int64_t>(first), run, seed, stream);
          break;
      }
    }
  }
}

void ParamRegistry::zero_grads() {
  if (grads_) std::memset(grads_, 0, flat_size_ * sizeof(float));
}

size_t ParamRegistry::name_slot(const std::string& name, size_t h) const {
  const size_t mask = by_name_.size() - 1;
  size_t i = h & mask;
  while (by_name_[i].index >= 0 &&
         (by_name_[i].hash != h || infos_[static_cast<size_t>(by_name_[i].index)].name != name))
    i = (i + 1) & mask;
  return i;
}

void ParamRegistry::index() const {
  std::call_once(indexed_, [this] {
    by_name_.assign(std::max<size_t>(64, std::bit_ceil(2 * infos_.size())), NameSlot{});
    for (size_t i = 0; i < infos_.size(); ++i) {
      const std::string& name = infos_[i].name;
      const size_t h = std::hash<std::string>{}(name);
      NameSlot& slot = by_name_[name_slot(name, h)];
      const bool twice = slot.index >= 0;
      if (twice) by_name_.clear();  // not indexed: the next lookup refuses it again
      K3_CHECK(!twice, "parameter '", name, "' registered twice");
      slot = {h, static_cast<int>(i)};
    }
  });
}

int ParamRegistry::find(const std::string& name) const {
  index();
  return by_name_[name_slot(name, std::hash<std::string>{}(name))].index;
}

Tensor ParamRegistry::value(int i) const {
  const ParamInfo& p = info(i);
  return Tensor::view(values_ + p.offset, p.local_shape);
}

void ParamRegistry::refresh_bf16() {
  K3_CHECK(values_, "bf16 copy of parameters before allocation");
  // Decoding streams these once a token: on 4 KiB pages their page walks (costly under a
  // hypervisor) cut the read rate by a third or more.
  if (!values_bf16_)
    values_bf16_ = static_cast<uint16_t*>(map_buffer(flat_size_ * sizeof(uint16_t), false));
  float_to_bf16(values_, values_bf16_, static_cast<int64_t>(flat_size_));
}

const uint16_t* ParamRegistry::value_bf16(int i) const {
  return values_bf16_ ? values_bf16_ + info(i).offset : nullptr;
}

Tensor ParamRegistry::grad(int i) const {
  const ParamInfo& p = info(i);
  return Tensor::view(grads_ + p.offset, p.local_shape);
}

int64_t ParamRegistry::total_numel() const {
  int64_t n = 0;
  for (const ParamInfo& p : infos_) n += p.numel();
  return n;
}

}  // namespace k3::model
