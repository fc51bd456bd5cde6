#include "k3/model/layers/tp_region.h"

#include <cstring>

#include "k3/base/error.h"

namespace k3::model {

int64_t local_rows(const Step& s, int64_t tokens) {
  const int tp = s.grid.tp().size();
  if (!s.sequence_parallel || tp == 1) return tokens;
  K3_CHECK(tokens % tp == 0, "sequence parallelism splits a micro-batch's tokens over tp = ", tp,
           ": ", tokens, " tokens do not split evenly");
  return tokens / tp;
}

TpRegion::TpRegion(const Step& s, int64_t tokens, int64_t width)
    : s_(s),
      tokens_(tokens),
      width_(width),
      rows_(local_rows(s, tokens)),
      offset_(rows_ != tokens ? s.grid.tp().rank() * rows_ * width : 0),
      split_(rows_ != tokens) {}

std::vector<int64_t> TpRegion::counts() const {
  return std::vector<int64_t>(static_cast<size_t>(s_.grid.tp().size()), rows_ * width_);
}

const float* TpRegion::gather(const float* x) const {
  if (!split_) return x;
  float* all = s_.alloc(tokens_ * width_);
  std::memcpy(local(all), x, static_cast<size_t>(rows_ * width_) * sizeof(float));
  s_.grid.tp().all_gather(all, counts());
  return all;
}

const float* TpRegion::enter(const float* x) const { return gather(x); }

const float* TpRegion::leave_backward(const float* dout) const { return gather(dout); }

float* TpRegion::partial(float* out) const { return split_ ? s_.alloc(tokens_ * width_) : out; }

void TpRegion::leave(float* partial, float* out) const {
  const dist::Comm& tp = s_.grid.tp();
  if (split_) {
    tp.reduce_scatter(partial, out, counts());
    return;
  }
  K3_CHECK(partial == out, "a region holding every token sums its output in place");
  tp.all_reduce(out, tokens_ * width_);  // a group of one leaves it as it is
}

}  // namespace k3::model
