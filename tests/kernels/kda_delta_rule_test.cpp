#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/kda_problem.h"
#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/kda/delta_rule.h"

namespace k3::kda_delta_rule_test {
namespace {

using kernels::kda::DeltaRuleGrads;
using kernels::kda::DeltaRuleInputs;
using kernels::kda::DeltaRuleShape;
using testing::cast_vec;
using testing::Decay;
using testing::Problem;
using testing::shape;
using testing::sigmoid;

std::string str(const DeltaRuleShape& s) {
  std::ostringstream os;
  os << "B=" << s.B << " T=" << s.T << " H=" << s.H << " K=" << s.K << " V=" << s.V;
  if (!s.doc_starts.empty()) os << " docs:";
  for (int64_t x : s.doc_starts) os << " " << x;
  return os.str();
}

template <typename T>
struct Result {
  std::vector<T> out, final_state, dq, dk, dv, dg, dbeta, dinit;
  explicit Result(const DeltaRuleShape& s) {
    const auto rows = static_cast<size_t>(s.B * s.T * s.H);
    const auto states = static_cast<size_t>(s.num_sequences() * s.H * s.K * s.V);
    out.resize(rows * s.V);
    final_state.resize(states);
    dq.resize(rows * s.K);
    dk.resize(rows * s.K);
    dv.resize(rows * s.V);
    dg.resize(rows * s.K);
    dbeta.resize(rows);
    dinit.resize(states);
  }
  DeltaRuleGrads<T> grads() {
    return {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dinit.data()};
  }
  // The members that hold one entry per token row, with their row widths.
  std::vector<std::pair<std::vector<T>*, int64_t>> per_token(const DeltaRuleShape& s) {
    return {{&out, s.V}, {&dq, s.K}, {&dk, s.K}, {&dv, s.V}, {&dg, s.K}, {&dbeta, 1}};
  }
};

Result<float> run_chunked(const Problem& p) {
  Result<float> r(p.s);
  const DeltaRuleInputs<float> in{p.q.data(), p.k.data(),    p.v.data(),
                                  p.g.data(), p.beta.data(), p.init.data()};
  std::vector<float> states(kernels::kda::chunk_saved_floats(p.s));
  kernels::kda::chunk_forward(p.s, in, r.out.data(), r.final_state.data(), states.data());
  kernels::kda::chunk_backward(p.s, in, states.data(), p.dout.data(), p.dfinal.data(), r.grads());
  return r;
}

Result<double> run_reference(const Problem& p) {
  Result<double> r(p.s);
  const auto q = cast_vec<double>(p.q), k = cast_vec<double>(p.k), v = cast_vec<double>(p.v),
             g = cast_vec<double>(p.g), beta = cast_vec<double>(p.beta),
             init = cast_vec<double>(p.init), dout = cast_vec<double>(p.dout),
             dfinal = cast_vec<double>(p.dfinal);
  const DeltaRuleInputs<double> in{q.data(), k.data(),    v.data(),
                                   g.data(), beta.data(), init.data()};
  kernels::kda::recurrent_forward(p.s, in, r.out.data(), r.final_state.data());
  kernels::kda::recurrent_backward(p.s, in, dout.data(), dfinal.data(), r.grads());
  return r;
}

// Largest error relative to the largest reference entry (gradients can be near zero anywhere).
template <typename A, typename B>
double relative_error(const std::vector<A>& a, const std::vector<B>& b) {
  double scale = 1e-30;
  for (const auto& x : b) scale = std::max(scale, std::abs(static_cast<double>(x)));
  return testing::closeness(a, b, scale, 0.0);
}

template <typename A, typename B>
void expect_same(const Result<A>& a, const Result<B>& b, double tol, const std::string& what) {
  const std::pair<const char*, double> errors[] = {
      {"out", relative_error(a.out, b.out)},
      {"final_state", relative_error(a.final_state, b.final_state)},
      {"dq", relative_error(a.dq, b.dq)},
      {"dk", relative_error(a.dk, b.dk)},
      {"dv", relative_error(a.dv, b.dv)},
      {"dg", relative_error(a.dg, b.dg)},
      {"dbeta", relative_error(a.dbeta, b.dbeta)},
      {"dinitial_state", relative_error(a.dinit, b.dinit)}};
  for (const auto& [name, err] : errors) EXPECT_LE(err, tol) << name << ", " << what;
}

template <typename T>
bool all_finite(const Result<T>& r) {
  for (const auto* x : {&r.out, &r.final_state, &r.dq, &r.dk, &r.dv, &r.dg, &r.dbeta, &r.dinit})
    for (T e : *x)
      if (!std::isfinite(e)) return false;
  return true;
}

constexpr double kTol = 2e-5;  // fp32 chunked against the double reference, relative to the max

TEST(KdaDeltaRule, ChunkedMatchesRecurrent) {
  const DeltaRuleShape shapes[] = {
      shape(2, 1, 2, 64, 64),    shape(1, 63, 2, 64, 64),    shape(2, 64, 2, 64, 64),
      shape(1, 65, 2, 64, 64),   shape(1, 1000, 2, 64, 64),  shape(1, 65, 2, 16, 128),
      shape(1, 65, 1, 128, 128), shape(1, 1000, 1, 128, 16), shape(1, 1000, 1, 16, 128)};
  for (const DeltaRuleShape& s : shapes) {
    const Problem p(s, 100 + s.T + s.K);
    expect_same(run_chunked(p), run_reference(p), kTol, str(p.s));
  }
}

// Slow decays over several full chunks (and a partial one): the state each chunk hands on, and
// the state gradient each chunk hands back, reach every later (earlier) output and gradient with
// most of their weight, so an error in the decay applied to the carried state shows at the ~1e-2
// level. Full chunks alone (whole sequences, packed documents) and a final partial chunk; K3's
// head size. The fp32 chunked run accumulates its rounding over up to five chunks of carried state:
// measured at most 8e-7 of the largest entry (dinitial_state, which gathers every chunk), so kTol
// holds with ~25x to spare.
TEST(KdaDeltaRule, SlowDecaysCarryStateAcrossChunks) {
  const std::pair<DeltaRuleShape, std::vector<int64_t>> cases[] = {
      {shape(1, 4 * 64 + 17, 2, 64, 64), {}},
      {shape(2, 4 * 64, 2, 32, 48), {}},
      {shape(1, 5 * 64, 2, 32, 32), {0, 128, 192}},
      {shape(1, 3 * 64 + 5, 1, 128, 128), {}}};
  for (const auto& [s, docs] : cases) {
    const Problem p(s, 200 + s.T + s.K, Decay::Slow, docs);
    expect_same(run_chunked(p), run_reference(p), kTol, str(p.s));
  }
}

// Decays at the bound (e^{−5} per token in half the channels) stay on the dense tiles: each
// 16-token sub-chunk spans e^{−75}, at the edge of what its re-centred factors allow. The other
// channels decay slowly and carry the state over the three full chunks.
TEST(KdaDeltaRule, DecayAtTheBound) {
  const Problem p(shape(1, 200, 2, 32, 32), 9, Decay::AtBound);
  const Result<float> r = run_chunked(p);
  EXPECT_TRUE(all_finite(r));
  expect_same(r, run_reference(p), kTol, str(p.s));
}

// Steep decays take the per-pair path in some sub-chunks and the dense tiles in others.
TEST(KdaDeltaRule, UnboundedDecayStaysFiniteAndExact) {
  const Problem p(shape(1, 300, 2, 64, 32), 7, Decay::Unbounded, {0, 37, 200});
  EXPECT_LT(*std::min_element(p.g.begin(), p.g.end()), -200.0f);
  const Result<float> r = run_chunked(p);
  EXPECT_TRUE(all_finite(r));
  expect_same(r, run_reference(p), kTol, str(p.s));
}

// Recurrent backward against central differences of <out, dout> + <final_state, dfinal>: a batch,
// packed documents, and a sequence longer than the backward's recomputed segments.
TEST(KdaDeltaRule, RecurrentBackwardMatchesFiniteDifferences) {
  testing::ScopedThreads one(1);  // thousands of tiny runs
  const std::pair<DeltaRuleShape, std::vector<int64_t>> cases[] = {
      {shape(2, 9, 2, 4, 3), {}}, {shape(1, 9, 2, 4, 3), {0, 4}}, {shape(1, 70, 1, 2, 2), {}}};
  for (const auto& [s, docs] : cases) {
    const Problem p(s, 11, Decay::Bounded, docs);
    const Result<double> r = run_reference(p);
    const auto dout = cast_vec<double>(p.dout), dfinal = cast_vec<double>(p.dfinal);
    std::vector<std::vector<double>> x = {cast_vec<double>(p.q),    cast_vec<double>(p.k),
                                          cast_vec<double>(p.v),    cast_vec<double>(p.g),
                                          cast_vec<double>(p.beta), cast_vec<double>(p.init)};
    const std::vector<double>* analytic[] = {&r.dq, &r.dk, &r.dv, &r.dg, &r.dbeta, &r.dinit};
    const char* names[] = {"q", "k", "v", "g", "beta", "initial_state"};
    for (size_t i = 0; i < x.size(); ++i) {
      auto loss = [&](const std::vector<double>& xi) {
        auto y = x;
        y[i] = xi;
        Result<double> o(p.s);
        kernels::kda::recurrent_forward<double>(
            p.s, {y[0].data(), y[1].data(), y[2].data(), y[3].data(), y[4].data(), y[5].data()},
            o.out.data(), o.final_state.data());
        return testing::dot(o.out, dout) + testing::dot(o.final_state, dfinal);
      };
      const auto fd = testing::finite_difference(loss, x[i]);
      EXPECT_LE(testing::closeness(*analytic[i], fd, 1e-8, 1e-6), 1.0)
          << names[i] << ", " << str(p.s);
    }
  }
}

// A packed batch of documents equals one run per document, each from its own initial state.
TEST(KdaDeltaRule, PackedDocumentsEqualSeparateRuns) {
  const std::vector<int64_t> starts = {0, 100, 101, 165, 229};
  Problem p(shape(1, 300, 2, 32, 48), 21, Decay::Bounded, starts);
  Result<float> packed = run_chunked(p);
  expect_same(packed, run_reference(p), kTol, str(p.s));
  const int64_t state = p.s.H * p.s.K * p.s.V;
  for (size_t n = 0; n < starts.size(); ++n) {
    const int64_t t0 = starts[n], t1 = n + 1 < starts.size() ? starts[n + 1] : p.s.T;
    auto states = [&](const std::vector<float>& x) {
      return std::vector<float>(x.begin() + n * state, x.begin() + (n + 1) * state);
    };
    const Problem doc = p.slice(t0, t1, states(p.init), states(p.dfinal));
    Result<float> alone = run_chunked(doc);
    EXPECT_LE(relative_error(alone.final_state, states(packed.final_state)), 1e-6) << n;
    EXPECT_LE(relative_error(alone.dinit, states(packed.dinit)), 1e-6) << n;
    auto packed_rows = packed.per_token(p.s), alone_rows = alone.per_token(doc.s);
    for (size_t m = 0; m < packed_rows.size(); ++m) {
      const auto& [x, width] = packed_rows[m];
      const std::vector<float> rows(x->begin() + t0 * p.s.H * width,
                                    x->begin() + t1 * p.s.H * width);
      EXPECT_LE(relative_error(*alone_rows[m].first, rows), 1e-6)
          << "document " << n << " field " << m;
    }
  }
}

// Running [0, t1) and then [t1, T) from the returned final state equals one run over [0, T),
// forward and backward (the second run's dinitial_state is the first run's dfinal_state). Slow
// decays, so that the state handed over at t1 matters.
TEST(KdaDeltaRule, ContinuingFromFinalStateEqualsOneRun) {
  const Problem p(shape(1, 300, 2, 64, 64), 31, Decay::Slow);
  Result<float> whole = run_chunked(p);
  const auto whole_rows = whole.per_token(p.s);
  for (int64_t t1 : {128, 130}) {
    Problem first = p.slice(0, t1, p.init, {});
    first.dfinal.assign(p.dfinal.size(), 0.0f);
    const Result<float> head_fwd = run_chunked(first);
    const Problem second = p.slice(t1, p.s.T, head_fwd.final_state, p.dfinal);
    Result<float> tail = run_chunked(second);
    first.dfinal = tail.dinit;
    Result<float> head = run_chunked(first);
    EXPECT_LE(relative_error(tail.final_state, whole.final_state), kTol);
    EXPECT_LE(relative_error(head.dinit, whole.dinit), kTol);
    Result<float> joined(p.s);
    auto joined_rows = joined.per_token(p.s), head_rows = head.per_token(first.s),
         tail_rows = tail.per_token(second.s);
    for (size_t m = 0; m < joined_rows.size(); ++m) {
      std::vector<float>& x = *joined_rows[m].first;
      std::copy(head_rows[m].first->begin(), head_rows[m].first->end(), x.begin());
      std::copy(tail_rows[m].first->begin(), tail_rows[m].first->end(),
                x.begin() + static_cast<int64_t>(head_rows[m].first->size()));
      EXPECT_LE(relative_error(x, *whole_rows[m].first), kTol) << "t1=" << t1 << " field " << m;
    }
  }
}

// Without saved chunk records (inference) the forward is the same, with the state updated in place
// or kept in the workspace, for one head per thread or all heads in one; a sequence without
// tokens hands its initial state through.
TEST(KdaDeltaRule, ForwardOnlyInPlaceAndEmpty) {
  const Problem p(shape(1, 100, 2, 32, 32), 61);
  const Result<float> saved = run_chunked(p);
  const DeltaRuleInputs<float> in{p.q.data(), p.k.data(), p.v.data(), p.g.data(), p.beta.data()};
  for (int threads : {1, 2}) {
    testing::ScopedThreads scoped(threads);
    std::vector<float> out(saved.out.size()), state = p.init;
    DeltaRuleInputs<float> from_state = in;
    from_state.initial_state = state.data();
    kernels::kda::chunk_forward(p.s, from_state, out.data(), state.data(), nullptr);
    EXPECT_EQ(out, saved.out) << threads << " threads";
    EXPECT_EQ(state, saved.final_state) << threads << " threads";
    std::vector<float> out_only(saved.out.size());
    DeltaRuleInputs<float> from_init = in;
    from_init.initial_state = p.init.data();
    kernels::kda::chunk_forward(p.s, from_init, out_only.data(), nullptr, nullptr);
    EXPECT_EQ(out_only, saved.out) << threads << " threads";
  }
  const Problem empty(shape(2, 0, 2, 16, 16), 62);
  const Result<float> r = run_chunked(empty);
  EXPECT_EQ(r.final_state, empty.init);
  EXPECT_EQ(r.dinit, empty.dfinal);
}

// Bit-identical results run to run and for any thread count, which also changes how the heads are
// grouped (all heads of a sequence in one group, or split over the threads).
TEST(KdaDeltaRule, Deterministic) {
  const Problem batch(shape(2, 200, 3, 32, 32), 41, Decay::Unbounded);
  const Problem packed(shape(1, 200, 3, 32, 32), 42, Decay::Bounded, {0, 70});
  for (const Problem* p : {&batch, &packed}) {
    const Result<float> a = run_chunked(*p);
    for (int threads : {1, 2, 3, 5}) {
      testing::ScopedThreads scoped(threads);
      const Result<float> b = run_chunked(*p);
      EXPECT_TRUE(a.out == b.out && a.final_state == b.final_state && a.dq == b.dq &&
                  a.dk == b.dk && a.dv == b.dv && a.dg == b.dg && a.dbeta == b.dbeta &&
                  a.dinit == b.dinit)
          << threads << " threads, " << str(p->s);
    }
  }
}

TEST(KdaDeltaRule, RejectsBadInput) {
  Problem p(shape(1, 10, 1, 16, 16), 51);
  std::vector<float> out(p.v.size()), final_state(p.init.size());
  auto forward = [&] {
    const DeltaRuleInputs<float> in{p.q.data(), p.k.data(), p.v.data(), p.g.data(), p.beta.data()};
    std::vector<float> states(kernels::kda::chunk_saved_floats(p.s));
    kernels::kda::chunk_forward(p.s, in, out.data(), final_state.data(), states.data());
  };
  for (const auto& docs :
       {std::vector<int64_t>{1, 5}, std::vector<int64_t>{0, 5, 5}, std::vector<int64_t>{0, 10}}) {
    p.docs = docs;
    p.s.doc_starts = p.docs;
    EXPECT_THROW(forward(), Error);
  }
  p.s.doc_starts = {};
  p.s.K = 0;
  EXPECT_THROW(forward(), Error);
  p.s.K = 16;
  EXPECT_THROW(kernels::kda::chunk_forward(p.s, {p.q.data()}, out.data(), nullptr, nullptr), Error);
}

}  // namespace
}  // namespace k3::kda_delta_rule_test
