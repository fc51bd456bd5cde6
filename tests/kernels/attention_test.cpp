#include "k3/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/reference.h"

namespace k3::attention_test {
namespace {

using kernels::AttentionShape;
using testing::cast_vec;
using testing::closeness;
using testing::random_vec;

std::string str(const AttentionShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " dqk=" + std::to_string(s.dqk) + " dr=" + std::to_string(s.dr) +
         " dv=" + std::to_string(s.dv) + " scale=" + std::to_string(s.scale);
}

// Random inputs of one shape; `amp` scales q so that scores reach about amp² in size.
struct Problem {
  AttentionShape s;
  std::vector<float> q, k, kr, v, dout;
  Problem(const AttentionShape& shape, uint64_t seed, double amp = 1.0) : s(shape) {
    const auto n = static_cast<size_t>(s.B * s.T * s.H);
    q = random_vec(n * (s.dqk + s.dr), seed, -amp, amp);
    k = random_vec(n * s.dqk, seed + 1, -amp, amp);
    kr = random_vec(static_cast<size_t>(s.B * s.T * s.dr), seed + 2, -amp, amp);
    v = random_vec(n * s.dv, seed + 3);
    dout = random_vec(n * s.dv, seed + 4);
  }
};

template <typename T>
struct Outputs {
  std::vector<T> out, lse, dq, dk, dkr, dv;
  explicit Outputs(const AttentionShape& s) {
    const auto n = static_cast<size_t>(s.B * s.T * s.H);
    out.resize(n * s.dv);
    lse.resize(n);
    dq.resize(n * (s.dqk + s.dr));
    dk.resize(n * s.dqk);
    dkr.resize(static_cast<size_t>(s.B * s.T * s.dr));
    dv.resize(n * s.dv);
  }
};

Outputs<float> run_fast(const Problem& p, bool backward = true) {
  Outputs<float> o(p.s);
  const float* kr = p.s.dr > 0 ? p.kr.data() : nullptr;
  kernels::attention_forward(p.s, p.q.data(), p.k.data(), kr, p.v.data(), o.out.data(),
                             o.lse.data());
  if (backward)
    kernels::attention_backward(p.s, p.q.data(), p.k.data(), kr, p.v.data(), o.out.data(),
                                o.lse.data(), p.dout.data(), o.dq.data(), o.dk.data(),
                                p.s.dr > 0 ? o.dkr.data() : nullptr, o.dv.data());
  return o;
}

Outputs<double> run_ref(const Problem& p, bool backward = true) {
  Outputs<double> o(p.s);
  const auto q = cast_vec<double>(p.q), k = cast_vec<double>(p.k), kr = cast_vec<double>(p.kr),
             v = cast_vec<double>(p.v), dout = cast_vec<double>(p.dout);
  ref::attention_forward<double>(p.s, q.data(), k.data(), kr.data(), v.data(), o.out.data(),
                                 o.lse.data());
  if (backward)
    ref::attention_backward<double>(p.s, q.data(), k.data(), kr.data(), v.data(), dout.data(),
                                    o.dq.data(), o.dk.data(), o.dkr.data(), o.dv.data());
  return o;
}

// Gradients are compared relative to the largest reference entry, since they can be near zero.
double relative_to_max(const std::vector<float>& a, const std::vector<double>& b, double tol) {
  double mx = 0;
  for (double x : b) mx = std::max(mx, std::abs(x));
  return closeness(a, b, tol * (mx + 1e-30), tol);
}

const AttentionShape kShapes[] = {
    // B, T, H, dqk, dr, dv, scale
    {1, 1, 1, 8, 0, 8, 0},      {2, 7, 3, 16, 8, 12, 0},      {1, 65, 2, 32, 0, 24, 0},
    {1, 130, 2, 64, 16, 48, 0}, {2, 257, 1, 24, 8, 40, 0.3f}, {1, 300, 3, 128, 64, 128, 0},
    {1, 128, 1, 17, 0, 33, 0},  {3, 129, 2, 5, 3, 7, 0},
};

TEST(Attention, EffectiveScale) {
  EXPECT_FLOAT_EQ((AttentionShape{1, 1, 1, 128, 64, 128, 0}).effective_scale(),
                  1.0f / std::sqrt(192.0f));
  EXPECT_FLOAT_EQ((AttentionShape{1, 1, 1, 64, 0, 64, 0.5f}).effective_scale(), 0.5f);
}

TEST(Attention, ForwardMatchesReference) {
  uint64_t seed = 10;
  for (const auto& s : kShapes) {
    const Problem p(s, seed += 10);
    const auto fast = run_fast(p, false);
    const auto ref = run_ref(p, false);
    EXPECT_LE(closeness(fast.out, ref.out, 2e-6, 2e-5), 1.0) << str(s);
    EXPECT_LE(closeness(fast.lse, ref.lse, 2e-6, 2e-6), 1.0) << str(s);
  }
}

TEST(Attention, ForwardLongSequence) {
  const AttentionShape s{1, 2048, 1, 32, 16, 24, 0};
  const Problem p(s, 7);
  const auto fast = run_fast(p, false);
  const auto ref = run_ref(p, false);
  EXPECT_LE(closeness(fast.out, ref.out, 2e-6, 2e-5), 1.0);
  EXPECT_LE(closeness(fast.lse, ref.lse, 2e-6, 2e-6), 1.0);
}

TEST(Attention, BackwardMatchesReference) {
  uint64_t seed = 500;
  for (const auto& s : kShapes) {
    const Problem p(s, seed += 10);
    const auto fast = run_fast(p);
    const auto ref = run_ref(p);
    EXPECT_LE(relative_to_max(fast.dq, ref.dq, 1e-5), 1.0) << "dq " << str(s);
    EXPECT_LE(relative_to_max(fast.dk, ref.dk, 1e-5), 1.0) << "dk " << str(s);
    EXPECT_LE(relative_to_max(fast.dkr, ref.dkr, 1e-5), 1.0) << "dkr " << str(s);
    EXPECT_LE(relative_to_max(fast.dv, ref.dv, 1e-5), 1.0) << "dv " << str(s);
  }
}

// Scores of typical size 5, up to ~20: the online softmax must rescale without loss of accuracy.
TEST(Attention, LargeScores) {
  const AttentionShape s{1, 333, 2, 32, 8, 32, 0};
  const Problem p(s, 99, 4.0);
  const auto fast = run_fast(p);
  const auto ref = run_ref(p);
  EXPECT_LE(closeness(fast.out, ref.out, 1e-5, 1e-4), 1.0);
  EXPECT_LE(closeness(fast.lse, ref.lse, 1e-5, 1e-5), 1.0);
  EXPECT_LE(relative_to_max(fast.dq, ref.dq, 3e-5), 1.0);
  EXPECT_LE(relative_to_max(fast.dk, ref.dk, 3e-5), 1.0);
  EXPECT_LE(relative_to_max(fast.dkr, ref.dkr, 3e-5), 1.0);
  EXPECT_LE(relative_to_max(fast.dv, ref.dv, 3e-5), 1.0);
}

// The double reference backward against central differences of the double reference forward,
// projected onto a random direction: L = <out, w>, so dout = w.
TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  for (const AttentionShape& s :
       {AttentionShape{2, 5, 2, 3, 2, 4, 0}, AttentionShape{1, 6, 3, 4, 0, 3, 0.7f}}) {
    const Problem p(s, 42);
    const auto n = static_cast<size_t>(s.B * s.T * s.H);
    std::vector<double> x[4] = {cast_vec<double>(p.q), cast_vec<double>(p.k),
                                cast_vec<double>(p.kr), cast_vec<double>(p.v)};
    const std::vector<double> w = cast_vec<double>(p.dout);
    auto loss = [&](int which, const std::vector<double>& xi) {
      std::vector<double> in[4] = {x[0], x[1], x[2], x[3]};
      in[which] = xi;
      std::vector<double> out(n * s.dv), lse(n);
      ref::attention_forward<double>(s, in[0].data(), in[1].data(), in[2].data(), in[3].data(),
                                     out.data(), lse.data());
      return testing::dot(out, w);
    };
    std::vector<double> grads[4] = {
        std::vector<double>(n * (s.dqk + s.dr)), std::vector<double>(n * s.dqk),
        std::vector<double>(static_cast<size_t>(s.B * s.T * s.dr)), std::vector<double>(n * s.dv)};
    ref::attention_backward<double>(s, x[0].data(), x[1].data(), x[2].data(), x[3].data(), w.data(),
                                    grads[0].data(), grads[1].data(), grads[2].data(),
                                    grads[3].data());
    const char* names[4] = {"dq", "dk", "dkr", "dv"};
    for (int which = 0; which < 4; ++which) {
      const auto fd = testing::finite_difference(
          [&](const std::vector<double>& xi) { return loss(which, xi); }, x[which]);
      EXPECT_LE(closeness(grads[which], fd, 1e-8, 1e-6), 1.0) << names[which] << " " << str(s);
    }
  }
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same_bits(const Outputs<float>& a, const Outputs<float>& b) {
  return same_bits(a.out, b.out) && same_bits(a.lse, b.lse) && same_bits(a.dq, b.dq) &&
         same_bits(a.dk, b.dk) && same_bits(a.dkr, b.dkr) && same_bits(a.dv, b.dv);
}

// Bit-identical across runs and thread counts. With three heads, one thread accumulates dq in the
// key pass while two or more threads use separate query items: the results must not differ.
TEST(Attention, Deterministic) {
  for (const AttentionShape& s :
       {AttentionShape{1, 300, 3, 32, 16, 24, 0}, AttentionShape{2, 200, 4, 16, 0, 8, 0}}) {
    const Problem p(s, 3);
    const auto first = run_fast(p);
    EXPECT_TRUE(same_bits(first, run_fast(p))) << str(s);
    const auto serial = [&] {
      testing::ScopedThreads one(1);
      return run_fast(p);
    }();
    EXPECT_TRUE(same_bits(first, serial)) << str(s);
  }
}

TEST(Attention, RejectsBadShapes) {
  const std::vector<float> buf(4096);
  std::vector<float> out(4096);
  const float* x = buf.data();
  auto forward = [&](const AttentionShape& s, const float* kr) {
    kernels::attention_forward(s, x, x, kr, x, out.data(), out.data());
  };
  EXPECT_THROW(forward({1, 4, 1, 8, 4, 8, 0}, nullptr), Error);  // dr > 0 needs kr
  EXPECT_THROW(forward({1, 4, 1, 8, 0, 8, 0}, x), Error);        // kr given but dr == 0
  EXPECT_THROW(forward({1, 4, 0, 8, 0, 8, 0}, nullptr), Error);
  EXPECT_THROW(forward({1, 4, 1, 0, 0, 8, 0}, nullptr), Error);
  EXPECT_THROW(forward({1, 4, 1, 8, 0, 0, 0}, nullptr), Error);
  EXPECT_NO_THROW(forward({0, 4, 1, 8, 0, 8, 0}, nullptr));
}

}  // namespace
}  // namespace k3::attention_test
