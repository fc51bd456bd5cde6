// The parameter registry (docs/design.md): every parameter has its K3 checkpoint name, its
// global shape, a shard spec, and lives in one flat buffer (values; gradients in a second flat
// buffer of the same layout), so a collective or ZeRO moves byte ranges of one buffer.
// The flat buffers hold this rank's shard of each parameter (its local shape): a parameter
// split over a group of size g keeps 1/g of the split dimension, at this rank's offset.
// Initialization draws from Philox keyed by (seed, name, global element index), so a shard
// equals the same slice of the unsplit tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::dist {
class ProcessGrid;
}

namespace k3::model {

// How a parameter lies over a process group ("tp", "ep", ...):
//   dim >= 0             split along dimension `dim` over `group`: each rank holds 1/size of it;
//   dim = -1, a group    replicated over `group`, but each rank's gradient is only its part of the
//                        total (from its own heads, or its own tokens under sequence parallelism):
//                        the gradients are summed over the group before the optimizer runs;
//   dim = -1, no group   replicated, with the same gradient on every rank.
// Independently, a routed expert's tensor has an owner under expert parallelism: only rank
// `ep_owner` of the "ep" group holds it (split over tp or not, as above); every other ep rank
// registers it with nothing held (local_numel() = 0), so every rank knows every tensor by name.
// Likewise under pipeline parallelism a layer's tensors are held only by the "pp" rank of its
// stage (`pp_owner`), the embedding by the first stage's and the head by the last's.
struct ShardSpec {
  int dim = -1;
  std::string group;
  int ep_owner = -1;  // -1: held on every ep rank
  int pp_owner = -1;  // -1: held on every pp rank

  static ShardSpec summed(std::string over) { return {-1, std::move(over)}; }
  bool split() const { return dim >= 0; }
  bool grad_summed_over(const std::string& g) const { return dim < 0 && group == g; }
  bool expert_owned() const { return ep_owner >= 0; }
};

// This rank's place in each process group that parameters are split over, by group name; a group
// not named has size 1. The registry needs nothing else of the grid, so a test can describe rank
// r of a group of size g without starting g processes.
struct GroupPlace {
  int size = 1, rank = 0;
};
using GroupPlaces = std::map<std::string, GroupPlace>;
// The places of this rank in the grid's groups (tp, cp, ep, dp, pp, replica).
GroupPlaces places_of(const dist::ProcessGrid& grid);

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
  std::string name;          // K3 checkpoint name, e.g. model.layers.3.self_attn.q_proj.weight
  Shape shape;               // global shape
  Shape local_shape;         // this rank's shard: `shape` with shard.dim divided by the group size
  int64_t shard_start = 0;   // where the shard begins along shard.dim (0 when replicated)
  DType dtype = DType::F32;  // training dtype (k3lab trains in fp32)
  ShardSpec shard;
  ParamInit init;
  size_t offset = 0;  // in floats, into the flat buffers; 64-byte aligned
  int64_t numel() const { return numel_; }  // of the global tensor
  int64_t local_numel() const { return local_numel_; }
  // False for an expert tensor another ep rank owns.
  bool held() const { return local_numel_ > 0 || numel_ == 0; }

 private:
  friend class ParamRegistry;
  // Of shape and local_shape, counted once at registration: the planner's loops over a K3 rank's
  // quarter of a million tensors read them many times.
  int64_t numel_ = 0, local_numel_ = 0;
};

// Where a parameter's shard lies in its global tensor (row-major): `runs` runs of `length`
// consecutive floats, one per index of the dimensions before the split one; run o is local
// elements [o·length, (o+1)·length) and global elements from o·stride + first. A replicated
// tensor is one run, the whole tensor; a tensor not held, no run.
struct ShardRuns {
  int64_t runs = 1, length = 0, stride = 0, first = 0;
};
ShardRuns shard_runs(const ParamInfo& p);

// This rank's shard of P from the global tensor (numel() floats) into LOCAL (local_numel()).
void copy_shard_from_global(const ParamInfo& p, const float* global, float* local);
// The shard LOCAL into its place in the global tensor GLOBAL; the rest of GLOBAL is untouched.
void copy_shard_to_global(const ParamInfo& p, const float* local, float* global);

class ParamRegistry {
 public:
  // `places`: this rank's place in the groups that shard specs name (none: one process).
  explicit ParamRegistry(GroupPlaces places = {});
  ~ParamRegistry();
  ParamRegistry(const ParamRegistry&) = delete;
  ParamRegistry& operator=(const ParamRegistry&) = delete;

  // Register before allocate(), with the global shape; returns the parameter's index. Throws when
  // the split dimension does not divide evenly over its group. A name registered twice is refused
  // once the names are indexed: by allocate() or the first find(), and from then on by add().
  int add(std::string name, Shape shape, ParamInit init, ShardSpec shard = {});
  // The parameters registered from now on are held only by rank `rank` of the "pp" group (-1:
  // by every pp rank): the model sets it before each pipeline stage's layers.
  void set_pp_owner(int rank) { pp_owner_ = rank; }
  // One flat buffer for values and one for gradients (zeroed), pre-faulted; indexes the names.
  void allocate();
  // Each local element from Philox(seed, stream_of(name), its global element index): identical
  // under any layout.
  void initialize(uint64_t seed);
  void zero_grads();

  int size() const { return static_cast<int>(infos_.size()); }
  const ParamInfo& info(int i) const { return infos_[static_cast<size_t>(i)]; }
  int find(const std::string& name) const;                  // -1 when absent
  const GroupPlace& place(const std::string& group) const;  // size 1 for a group not named
  // This rank's shard, in the local shape.
  Tensor value(int i) const;
  Tensor grad(int i) const;
  float* values() const { return values_; }
  float* grads() const { return grads_; }
  size_t flat_size() const { return flat_size_; }  // floats, including alignment padding
  int64_t total_numel() const;                     // elements of the global tensors
  // A bf16 copy of the values in the same layout, read by bf16 products instead of converting a
  // weight at every use: refresh_bf16() makes it, and must follow every change of the values
  // that the products are to see (Model::weights_changed). value_bf16 is null before that.
  void refresh_bf16();
  const uint16_t* value_bf16(int i) const;

 private:
  GroupPlaces places_;
  int pp_owner_ = -1;
  std::vector<ParamInfo> infos_;
  // The parameters by name: an open-addressed table of (hash of the name, index into infos_),
  // a power of two long and at most half full, -1 an empty slot; empty until indexed. A K3 rank
  // registers a quarter of a million tensors (every expert of every layer): no node or copy of
  // the name each. A rank the planner describes (never allocated) rarely looks a name up, so the
  // table is built at the first lookup or at allocation, sized once for every name.
  struct NameSlot {
    size_t hash = 0;
    int index = -1;
  };
  mutable std::vector<NameSlot> by_name_;
  mutable std::once_flag indexed_;
  // Builds the table once (a lookup may come from several threads), refusing a name registered
  // twice.
  void index() const;
  // The slot holding NAME (of hash H), or the empty slot where it would go.
  size_t name_slot(const std::string& name, size_t h) const;
  size_t flat_size_ = 0;
  float* values_ = nullptr;
  float* grads_ = nullptr;
  uint16_t* values_bf16_ = nullptr;  // mapped like the values: huge pages where allowed
};

}  // namespace k3::model
