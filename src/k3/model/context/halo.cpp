#include "k3/model/context/halo.h"

#include <algorithm>
#include <vector>

#include "k3/base/profile.h"

namespace k3::model {
namespace {

constexpr int kHaloTag = 71;

// Receives from `from` (none: zeros) while sending to `to` (none: nothing).
void shift(const dist::Comm& cp, const float* mine, float* received, int64_t n, int to, int from) {
  ProfileScope time("kda/conv halos");
  dist::Request recv, send;
  if (from >= 0 && from < cp.size())
    recv = cp.recv_async(received, n, from, kHaloTag);
  else
    std::fill(received, received + n, 0.f);
  if (to >= 0 && to < cp.size()) send = cp.send_async(mine, n, to, kHaloTag);
  recv.wait();
  send.wait();
}

}  // namespace

void pass_to_next(const dist::Comm& cp, const float* mine, float* from_previous, int64_t n) {
  shift(cp, mine, from_previous, n, cp.rank() + 1, cp.rank() - 1);
}

void pass_to_previous(const dist::Comm& cp, const float* mine, float* from_next, int64_t n) {
  shift(cp, mine, from_next, n, cp.rank() - 1, cp.rank() + 1);
}

namespace {

// Slot j's windows of every group and row, [groups, B, W], out of or into [groups, 2B, W].
std::vector<float> slot_of(const float* x, int64_t groups, int64_t B, int64_t W, int j) {
  std::vector<float> out;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < B; ++b) {
      const float* at = x + ((g * B + b) * 2 + j) * W;
      out.insert(out.end(), at, at + W);
    }
  return out;
}
void put_slot(float* x, const std::vector<float>& part, int64_t groups, int64_t B, int64_t W,
              int j) {
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(part.begin() + (g * B + b) * W, W, x + ((g * B + b) * 2 + j) * W);
}

}  // namespace

void zigzag_windows(const dist::Comm& cp, const float* tails, float* windows, int64_t groups,
                    int64_t B, int64_t W) {
  const int64_t n = groups * B * W;
  const std::vector<float> t0 = slot_of(tails, groups, B, W, 0),
                           t1 = slot_of(tails, groups, B, W, 1);
  std::vector<float> w0(static_cast<size_t>(n)), w1(static_cast<size_t>(n));
  pass_to_next(cp, t0.data(), w0.data(), n);
  pass_to_previous(cp, t1.data(), w1.data(), n);
  if (cp.rank() == cp.size() - 1) w1 = t0;  // span cp follows span cp − 1, both here
  put_slot(windows, w0, groups, B, W, 0);
  put_slot(windows, w1, groups, B, W, 1);
}

void zigzag_windows_backward(const dist::Comm& cp, const float* dwindows, float* dtails,
                             int64_t groups, int64_t B, int64_t W) {
  const int64_t n = groups * B * W;
  const std::vector<float> d0 = slot_of(dwindows, groups, B, W, 0),
                           d1 = slot_of(dwindows, groups, B, W, 1);
  std::vector<float> t0(static_cast<size_t>(n)), t1(static_cast<size_t>(n));
  pass_to_previous(cp, d0.data(), t0.data(), n);
  pass_to_next(cp, d1.data(), t1.data(), n);
  if (cp.rank() == cp.size() - 1) t0 = d1;  // its slot 1 window was its own slot 0 tail
  put_slot(dtails, t0, groups, B, W, 0);
  put_slot(dtails, t1, groups, B, W, 1);
}

}  // namespace k3::model
