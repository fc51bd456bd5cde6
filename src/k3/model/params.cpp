#include "k3/model/params.h"

#include <algorithm>
#include <cstring>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"

namespace k3::model {

ParamRegistry::~ParamRegistry() {
  unmap_buffer(values_, flat_size_ * sizeof(float));
  unmap_buffer(grads_, flat_size_ * sizeof(float));
}

int ParamRegistry::add(std::string name, Shape shape, ParamInit init, ShardSpec shard) {
  K3_CHECK(!values_, "parameter '", name, "' registered after allocation");
  K3_CHECK(!by_name_.count(name), "parameter '", name, "' registered twice");
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.init = std::move(init);
  p.shard = std::move(shard);
  p.offset = flat_size_;
  flat_size_ += (static_cast<size_t>(p.numel()) + 15) / 16 * 16;  // keep every tensor 64-byte aligned
  by_name_[p.name] = size();
  infos_.push_back(std::move(p));
  return size() - 1;
}

void ParamRegistry::allocate() {
  K3_CHECK(!values_, "parameters allocated twice");
  values_ = static_cast<float*>(map_buffer(flat_size_ * sizeof(float)));
  grads_ = static_cast<float*>(map_buffer(flat_size_ * sizeof(float)));
  std::memset(values_, 0, flat_size_ * sizeof(float));
  zero_grads();
}

void ParamRegistry::initialize(uint64_t seed) {
  K3_CHECK(values_, "parameters initialized before allocation");
  for (const ParamInfo& p : infos_) {
    float* out = values_ + p.offset;
    const int64_t n = p.numel();
    const uint64_t stream = stream_of(p.name);
    switch (p.init.kind) {
      case ParamInit::Kind::Normal: fill_normal(out, n, seed, stream, 0, 0.f, p.init.std); break;
      case ParamInit::Kind::Zeros: std::fill(out, out + n, 0.f); break;
      case ParamInit::Kind::Ones: std::fill(out, out + n, 1.f); break;
      case ParamInit::Kind::Custom: p.init.fill(out, 0, n, seed, stream); break;
    }
  }
}

void ParamRegistry::zero_grads() {
  if (grads_) std::memset(grads_, 0, flat_size_ * sizeof(float));
}

int ParamRegistry::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

Tensor ParamRegistry::value(int i) const {
  const ParamInfo& p = info(i);
  return Tensor::view(values_ + p.offset, p.shape);
}

Tensor ParamRegistry::grad(int i) const {
  const ParamInfo& p = info(i);
  return Tensor::view(grads_ + p.offset, p.shape);
}

int64_t ParamRegistry::total_numel() const {
  int64_t n = 0;
  for (const ParamInfo& p : infos_) n += p.numel();
  return n;
}

}  // namespace k3::model
