// KCP (model/context/kcp.h): the gated delta rule over a sequence split across ranks.
//   Kcp.*     in one process: span pairs composed by the fold against the sequential recurrence
//             over the whole prefix;
//   KcpMpi.*  under mpirun -np 2 and 4 (and trivially in one process): every rank's outputs and
//             gradients against the chunked kernel over the whole sequence, each rank computing
//             that reference itself, also on packed documents; the bytes per call the same at two
//             sequence lengths; the scratch taken from the arena given and given back, so that
//             a second call faults in no memory.
// Tolerances: 1e-4 of each tensor's largest entry (fp32; the fold adds the spans' states in
// another order than the chunked pass carries them; measured below 1e-5). A pair applied in the
// wrong order, or a missing transposed term, moves a value by its own size.
#include "k3/model/context/kcp.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <vector>

#include "common/kda_problem.h"
#include "common/test_util.h"
#include "common/tp_util.h"
#include "parallel/large_allocations.h"

namespace k3::model {
namespace {

using kernels::kda::DeltaRuleGrads;
using kernels::kda::DeltaRuleInputs;
using kernels::kda::DeltaRuleShape;
using testing::Decay;
using testing::max_rel_error;
using testing::Problem;
using testing::shape;

// The scratch of the calls below (rewound by each).
Arena& scratch() {
  static Arena arena(size_t{256} << 20, false);
  return arena;
}

// Pieces {first token, count} of every batch row, in order: a rank's tokens of each sequence.
using Pieces = std::vector<std::pair<int64_t, int64_t>>;

// Those tokens of every batch row of x ([B, T, H, width]).
std::vector<float> span(const std::vector<float>& x, const DeltaRuleShape& s, int64_t width,
                        const Pieces& pieces) {
  std::vector<float> out;
  for (int64_t b = 0; b < s.B; ++b)
    for (auto [t0, n] : pieces) {
      const auto at = x.begin() + (b * s.T + t0) * s.H * width;
      out.insert(out.end(), at, at + n * s.H * width);
    }
  return out;
}

// A problem's inputs and output gradient for those tokens; s.T is one piece's length.
struct Span {
  DeltaRuleShape s;
  std::vector<float> q, k, v, g, beta, dout;
  Span(const Problem& p, const Pieces& pieces) : s(p.s) {
    s.T = pieces[0].second;
    q = span(p.q, p.s, p.s.K, pieces), k = span(p.k, p.s, p.s.K, pieces);
    g = span(p.g, p.s, p.s.K, pieces), v = span(p.v, p.s, p.s.V, pieces);
    beta = span(p.beta, p.s, 1, pieces), dout = span(p.dout, p.s, p.s.V, pieces);
  }
  Span(const Problem& p, int64_t t0, int64_t t1) : Span(p, Pieces{{t0, t1 - t0}}) {}
  DeltaRuleInputs<float> in() const {
    return {q.data(), k.data(), v.data(), g.data(), beta.data(), nullptr};
  }
};

// The forward's records, held for the backward.
struct Kept {
  std::vector<float> pairs, incoming, records;
  KcpSaved saved;
  Kept(const DeltaRuleShape& s, const KcpLayout& l)
      : pairs(static_cast<size_t>(kcp_pair_floats(s) * l.spans())),
        incoming(static_cast<size_t>(kcp_state_floats(s) * l.slots)),
        records(static_cast<size_t>(kcp_records_floats(l, s))),
        saved{pairs.data(), incoming.data(), records.data()} {}
};

TEST(Kcp, PairsComposeToTheSequentialRecurrence) {
  for (Decay decay : {Decay::Slow, Decay::AtBound, Decay::Bounded}) {
    const Problem p(shape(2, 300, 2, 32, 16), 11, decay);
    const std::vector<int64_t> cuts = {0, 70, 200, 300};  // spans not aligned to chunks
    const int64_t per = kcp_pair_floats(p.s);
    std::vector<float> pairs;
    for (size_t r = 0; r + 1 < cuts.size(); ++r) {
      const Span sp(p, cuts[r], cuts[r + 1]);
      std::vector<float> pair(static_cast<size_t>(per));
      kcp_span_pairs(scratch(), sp.s, sp.in(), pair.data());
      pairs.insert(pairs.end(), pair.begin(), pair.end());
    }
    for (size_t r = 1; r < cuts.size(); ++r) {
      const Span prefix(p, 0, cuts[r]);
      std::vector<float> out(static_cast<size_t>(prefix.s.B * prefix.s.T * p.s.H * p.s.V)),
          want(static_cast<size_t>(p.s.B * p.s.H * p.s.K * p.s.V)), got(want.size());
      kernels::kda::recurrent_forward(prefix.s, prefix.in(), out.data(), want.data());
      kcp_fold(scratch(), p.s, KcpLayout{3, 0, 1, {}}, pairs.data(), static_cast<int>(r),
               got.data());
      EXPECT_LT(max_rel_error(got.data(), want.data(), static_cast<int64_t>(want.size())), 1e-4)
          << "state after " << r << " spans";
    }
  }
}

// This rank's pieces under a layout of `slots` spans a rank (kcp.h).
Pieces pieces_of(const KcpLayout& l, int64_t T) {
  const int64_t n = T / l.spans();
  Pieces out;
  for (int j = 0; j < l.slots; ++j) out.push_back({l.span_of(j) * n, n});
  return out;
}

// docs: packed documents of one row (global starts), or none (two rows, each one sequence).
void check_against_one_process(Decay decay, int64_t T, int slots = 1,
                               const std::vector<int64_t>& docs = {}) {
  const dist::Comm cp = dist::Comm::world();
  const KcpLayout layout{cp.size(), cp.rank(), slots, docs};
  if (T % layout.spans() != 0) GTEST_SKIP();
  const Problem p(shape(docs.empty() ? 2 : 1, T, 2, 32, 16), 21, decay, docs);
  // The reference: the whole sequence in one chunked pass, from a zero state.
  DeltaRuleInputs<float> whole{p.q.data(), p.k.data(),    p.v.data(),
                               p.g.data(), p.beta.data(), nullptr};
  const int64_t rows = p.s.B * p.s.T * p.s.H;
  std::vector<float> out(static_cast<size_t>(rows * p.s.V)),
      saved(static_cast<size_t>(kernels::kda::chunk_saved_floats(p.s)));
  kernels::kda::chunk_forward(p.s, whole, out.data(), nullptr, saved.data());
  std::vector<float> dq(static_cast<size_t>(rows * p.s.K)), dk(dq.size()), dg(dq.size()),
      dv(out.size()), dbeta(static_cast<size_t>(rows));
  kernels::kda::chunk_backward(p.s, whole, saved.data(), p.dout.data(), nullptr,
                               {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), nullptr});

  const Pieces pieces = pieces_of(layout, T);
  Span mine(p, pieces);
  mine.s.doc_starts = {};  // a span's documents come from the layout
  const int64_t n = mine.s.B * mine.s.T * slots * p.s.H;
  std::vector<float> o(static_cast<size_t>(n * p.s.V));
  Kept kept(mine.s, layout);
  kcp_forward(scratch(), cp, layout, mine.s, mine.in(), o.data(), kept.saved);
  std::vector<float> gq(static_cast<size_t>(n * p.s.K)), gk(gq.size()), gg(gq.size()), gv(o.size()),
      gb(static_cast<size_t>(n));
  kcp_backward(scratch(), cp, layout, mine.s, mine.in(), kept.saved, mine.dout.data(),
               {gq.data(), gk.data(), gv.data(), gg.data(), gb.data(), nullptr});
  const auto expect = [&](const std::vector<float>& got, const std::vector<float>& all,
                          int64_t width, const char* what) {
    const std::vector<float> want = span(all, p.s, width, pieces);
    EXPECT_LT(max_rel_error(got.data(), want.data(), static_cast<int64_t>(want.size())), 1e-4)
        << what << " on rank " << cp.rank();
  };
  expect(o, out, p.s.V, "out");
  expect(gq, dq, p.s.K, "dq");
  expect(gk, dk, p.s.K, "dk");
  expect(gv, dv, p.s.V, "dv");
  expect(gg, dg, p.s.K, "dg");
  expect(gb, dbeta, 1, "dbeta");
}

TEST(KcpMpi, MatchesOneProcessWithSlowDecays) { check_against_one_process(Decay::Slow, 512); }
TEST(KcpMpi, MatchesOneProcessAtTheGatesBound) { check_against_one_process(Decay::AtBound, 512); }
// Spans that do not fall on chunk boundaries (T / cp = 150 or 75 tokens).
TEST(KcpMpi, MatchesOneProcessOnUnalignedSpans) { check_against_one_process(Decay::Slow, 300); }
// Two spans a rank, zig-zag (as ring attention assigns them).
TEST(KcpMpi, MatchesOneProcessOnZigZagSpans) { check_against_one_process(Decay::Slow, 512, 2); }
TEST(KcpMpi, MatchesOneProcessOnZigZagSpansAtTheBound) {
  check_against_one_process(Decay::AtBound, 320, 2);
}

// Packed documents of one row, zig-zag spans of 40 tokens at cp2 (20 at cp4; 32 in one process):
// starts inside spans, on span boundaries (40, 160), one token before one (199), and documents
// crossing several spans (from 60 to 159, from 200 to the end).
const std::vector<int64_t> kDocs = {0, 13, 40, 60, 160, 199, 200};
TEST(KcpMpi, MatchesOneProcessOnPackedDocuments) {
  check_against_one_process(Decay::Slow, 320, 2, kDocs);
}
TEST(KcpMpi, MatchesOneProcessOnPackedDocumentsAtTheBound) {
  check_against_one_process(Decay::AtBound, 320, 2, kDocs);
}
// One span a rank (consecutive), documents crossing ranks.
TEST(KcpMpi, MatchesOneProcessOnPackedDocumentsInConsecutiveSpans) {
  check_against_one_process(Decay::Slow, 320, 1, kDocs);
}

// One forward and backward move the pairs ([B, H, K, V + K] a rank) and the state gradients
// ([B, H, K, V] a rank) in two all-gathers, whatever the sequence length.
TEST(KcpMpi, BytesDoNotDependOnTheSequenceLength) {
  const dist::Comm cp = dist::Comm::world();
  std::vector<int64_t> moved;
  for (int64_t T : {1024, 16384}) {
    const Problem p(shape(1, T, 2, 32, 32), 5, Decay::Bounded);
    const KcpLayout layout{cp.size(), cp.rank(), 1, {}};
    const int64_t t0 = T / cp.size() * cp.rank(), t1 = t0 + T / cp.size();
    const Span mine(p, t0, t1);
    std::vector<float> o(static_cast<size_t>(mine.s.T * p.s.H * p.s.V));
    const int64_t n = mine.s.T * p.s.H;
    std::vector<float> gq(static_cast<size_t>(n * p.s.K)), gk(gq.size()), gg(gq.size()),
        gv(o.size()), gb(static_cast<size_t>(n));
    const int64_t before = cp.counters().bytes();
    Kept kept(mine.s, layout);
    kcp_forward(scratch(), cp, layout, mine.s, mine.in(), o.data(), kept.saved);
    kcp_backward(scratch(), cp, layout, mine.s, mine.in(), kept.saved, mine.dout.data(),
                 {gq.data(), gk.data(), gv.data(), gg.data(), gb.data(), nullptr});
    moved.push_back(cp.counters().bytes() - before);
  }
  const int64_t H = 2, K = 32, V = 32;
  EXPECT_EQ(moved[0], moved[1]);
  // A group of one counts no bytes (dist/comm.h).
  EXPECT_EQ(moved[0], cp.size() > 1 ? 4 * cp.size() * H * K * ((V + K) + V) : 0);
}

// Every buffer a call needs beside its inputs and outputs is scratch of the arena it is given, left
// as it was: a second forward and backward asks the heap for no page (any rank count), and on one
// rank faults in no memory (the first call faulted the arena's). Measured before the scratch came
// from the arena: 430 to 713 pages a call on 4 ranks. Faults are counted for the calling thread
// (RUSAGE_THREAD: the MPI runtime's threads fault pages of their own) and on one rank only: with
// more, MPI's shared-memory transport maps its fragments in lazily (1 to 8 pages a call measured
// on 4 ranks, more under load). On one thread: the kernels' per-thread tiles are faulted in by
// whichever thread first needs them.
TEST(KcpMpi, ScratchComesFromTheArenaAndIsGivenBack) {
  const testing::ScopedThreads one(1);
  const dist::Comm cp = dist::Comm::world();
  const KcpLayout layout{cp.size(), cp.rank(), 2, {}};
  const Problem p(shape(2, 2048, 2, 32, 32), 5, Decay::Bounded);
  Span mine(p, pieces_of(layout, p.s.T));
  const int64_t n = mine.s.B * mine.s.T * 2 * p.s.H;
  std::vector<float> o(static_cast<size_t>(n * p.s.V)), gq(static_cast<size_t>(n * p.s.K)),
      gk(gq.size()), gg(gq.size()), gv(o.size()), gb(static_cast<size_t>(n));
  Kept kept(mine.s, layout);
  Arena arena(size_t{64} << 20, false);
  std::vector<long> faults;
  std::vector<int64_t> heap_bytes;
  for (int call = 0; call < 2; ++call) {
    rusage before{}, after{};
    getrusage(RUSAGE_THREAD, &before);
    const testing::LargeAllocations large;
    kcp_forward(arena, cp, layout, mine.s, mine.in(), o.data(), kept.saved);
    kcp_backward(arena, cp, layout, mine.s, mine.in(), kept.saved, mine.dout.data(),
                 {gq.data(), gk.data(), gv.data(), gg.data(), gb.data(), nullptr});
    heap_bytes.push_back(large.bytes());
    getrusage(RUSAGE_THREAD, &after);
    faults.push_back(after.ru_minflt - before.ru_minflt);
    EXPECT_EQ(arena.used(), 0u);
  }
  EXPECT_GT(arena.peak(), o.size() * sizeof(float));  // at least a slot's inputs and output
  EXPECT_EQ(heap_bytes[1], 0) << "heap bytes in pages or more, first call: " << heap_bytes[0];
  if (cp.size() == 1) {
    EXPECT_EQ(faults[1], 0) << "pages faulted in by the first call: " << faults[0];
  }
}

}  // namespace
}  // namespace k3::model
