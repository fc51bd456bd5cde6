#include "k3/model/layers/linear.h"

#include "k3/kernels/elementwise.h"
#include "k3/kernels/gemm.h"

namespace k3::model {
namespace {

ShardSpec shard_of(LinearMode mode) {
  switch (mode) {
    case LinearMode::column: return {0, "tp"};
    case LinearMode::row: return {1, "tp"};
    case LinearMode::replicated: break;
  }
  return {};
}

}  // namespace

Linear::Linear(ParamRegistry& reg, const std::string& name, int64_t in, int64_t out, float std,
               LinearMode mode)
    : w_(reg.add(name + ".weight", {out, in}, ParamInit::normal(std), shard_of(mode))),
      in_(reg.info(w_).local_shape[1]),
      out_(reg.info(w_).local_shape[0]),
      mode_(mode) {}

void Linear::forward(const Step& s, const float* x, int64_t rows, float* y) const {
  kernels::gemm(false, true, rows, out_, in_, 1.f, x, s.params.value(w_).f32(), 0.f, y);
  if (mode_ == LinearMode::row) s.grid.tp().all_reduce(y, rows * out_);
}

void Linear::backward(const Step& s, const float* x, const float* dy, int64_t rows, float* dx,
                      bool accumulate_dx) const {
  kernels::gemm(true, false, out_, in_, rows, 1.f, dy, x, 1.f, s.params.grad(w_).f32());
  if (!dx) return;
  const dist::Comm& tp = s.grid.tp();
  if (mode_ != LinearMode::column || tp.size() == 1) {
    kernels::gemm(false, false, rows, in_, out_, 1.f, dy, s.params.value(w_).f32(),
                  accumulate_dx ? 1.f : 0.f, dx);
    return;
  }
  // Only this layer's part of dx is summed over tp: what dx held before is already whole.
  ArenaScope scope(s.arena);
  float* part = accumulate_dx ? s.alloc(rows * in_) : dx;
  kernels::gemm(false, false, rows, in_, out_, 1.f, dy, s.params.value(w_).f32(), 0.f, part);
  tp.all_reduce(part, rows * in_);
  if (accumulate_dx) kernels::add_inplace(dx, part, rows * in_);
}

}  // namespace k3::model
