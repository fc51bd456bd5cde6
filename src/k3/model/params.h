// The parameter registry (docs/design.md): every parameter has its K3 checkpoint name, its
// global shape, a shard spec, and lives in one flat buffer (values; gradients in a second flat
// buffer of the same layout), so a collective or ZeRO moves byte ranges of one buffer.
// Initialization draws from Philox keyed by (seed, name, global element index).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::model {

// Which dimension is split over which process group; dim = -1 means replicated. Every group has
// size 1 until the parallel layers exist, so shards equal global tensors.
struct ShardSpec {
  int dim = -1;
  std::string group;
};

struct ParamInit {
  enum class Kind { Normal, Zeros, Ones, Custom };
  Kind kind = Kind::Normal;
  float std = 0.02f;
  // Custom: fill out[0, n) with elements [first, first + n) of the tensor.
  std::function<void(float* out, int64_t first, int64_t n, uint64_t seed, uint64_t stream)> fill;

  static ParamInit normal(float std) { return {Kind::Normal, std, {}}; }
  static ParamInit zeros() { return {Kind::Zeros, 0, {}}; }
  static ParamInit ones() { return {Kind::Ones, 0, {}}; }
};

struct ParamInfo {
  std::string name;   // K3 checkpoint name, e.g. model.layers.3.self_attn.q_proj.weight
  Shape shape;        // global shape
  DType dtype = DType::F32;  // training dtype (k3lab trains in fp32)
  ShardSpec shard;
  ParamInit init;
  size_t offset = 0;  // in floats, into the flat buffers; 64-byte aligned
  int64_t numel() const { return shape_numel(shape); }
};

class ParamRegistry {
 public:
  ParamRegistry() = default;
  ~ParamRegistry();
  ParamRegistry(const ParamRegistry&) = delete;
  ParamRegistry& operator=(const ParamRegistry&) = delete;

  // Register before allocate(); returns the parameter's index.
  int add(std::string name, Shape shape, ParamInit init, ShardSpec shard = {});
  // One flat buffer for values and one for gradients (zeroed), pre-faulted.
  void allocate();
  // Values from Philox(seed, stream_of(name), element index): identical under any layout.
  void initialize(uint64_t seed);
  void zero_grads();

  int size() const { return static_cast<int>(infos_.size()); }
  const ParamInfo& info(int i) const { return infos_[static_cast<size_t>(i)]; }
  int find(const std::string& name) const;  // -1 when absent
  Tensor value(int i) const;
  Tensor grad(int i) const;
  float* values() const { return values_; }
  float* grads() const { return grads_; }
  size_t flat_size() const { return flat_size_; }  // floats, including alignment padding
  int64_t total_numel() const;  // parameter values, without the padding

 private:
  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, int> by_name_;
  size_t flat_size_ = 0;
  float* values_ = nullptr;
  float* grads_ = nullptr;
};

}  // namespace k3::model
