// One-sided transfers into another rank's window, in one process and under mpirun -np 2, 3 and 4:
// each rank writes its own values into the next rank's memory, reads them back, and finds them
// unchanged while that rank wrote its own elsewhere; a transfer outside the window is refused.
#include "k3/dist/window.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "k3/base/error.h"

namespace k3::dist {
namespace {

TEST(Window, WhatOneRankPutsInAnothersMemoryComesBack) {
  const Comm world = Comm::world();
  const size_t n = 5000, bytes = n * sizeof(float);
  Window w(world, 2 * bytes + 4096);
  const int next = (world.rank() + 1) % world.size();
  std::vector<float> a(n), b(n, -1), c(n, -1);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(world.rank() * 10000 + i);
  const Window::Ticket t = w.put(a.data(), bytes, next, 4096);
  const Window::Ticket u = w.put(a.data() + 1000, 1000 * sizeof(float), next, 4096 + bytes);
  w.wait(t);
  w.wait(u);
  world.barrier();  // every rank's puts are done: none may disturb another's
  const Window::Ticket g = w.get(b.data(), bytes, next, 4096);
  const Window::Ticket h = w.get(c.data(), 1000 * sizeof(float), next, 4096 + bytes);
  w.wait(g);
  w.wait(h);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(a.data() + 1000, c.data(), 1000 * sizeof(float)), 0);
  EXPECT_THROW(w.put(a.data(), bytes, next, bytes + 8192), Error);
  EXPECT_THROW(w.get(b.data(), bytes, world.size(), 0), Error);
  world.barrier();
}

}  // namespace
}  // namespace k3::dist
