#include "k3/model/context/kcp.h"

#include <algorithm>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/model/context/documents.h"

namespace k3::model {
namespace {

using kernels::kda::DeltaRuleGrads;
using kernels::kda::DeltaRuleInputs;
using kernels::kda::DeltaRuleShape;

// The pair pass's shape and inputs: values [v | 0], initial state [0 | I] (V + K columns); with
// packed documents only the first sequence (the document the span continues) starts from [0 | I],
// and none when the span begins a document.
struct PairPass {
  DeltaRuleShape shape;
  std::vector<float> values, initial;
  DeltaRuleInputs<float> in;

  PairPass(const DeltaRuleShape& s, const DeltaRuleInputs<float>& base, bool fresh) : shape(s) {
    const int64_t K = s.K, V = s.V, W = V + K, rows = s.B * s.T * s.H;
    shape.V = W;
    values.assign(static_cast<size_t>(rows * W), 0.f);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(base.v + r * V, V, values.begin() + r * W);
    initial.assign(static_cast<size_t>(s.num_sequences() * s.H * K * W), 0.f);
    const int64_t continued = fresh ? 0 : s.doc_starts.empty() ? s.B : 1;
    for (int64_t bh = 0; bh < continued * s.H; ++bh)
      for (int64_t i = 0; i < K; ++i) initial[static_cast<size_t>((bh * K + i) * W + V + i)] = 1.f;
    in = {base.q, base.k, values.data(), base.g, base.beta, initial.data()};
  }
  // Where the span's pair lies among the final states: its last sequence's (every row's).
  int64_t pair_offset() const {
    return shape.doc_starts.empty() ? 0 : (shape.num_sequences() - 1) * shape.H * shape.K * shape.V;
  }
};

// The states one slot's normal pass starts from: its incoming state for the sequence it continues
// (zero when it begins a document), zero for the documents that start inside it.
struct SlotStart {
  std::vector<float> states;
  const float* ptr;
  SlotStart(const DeltaRuleShape& s, const float* incoming) : ptr(incoming) {
    if (s.doc_starts.empty()) return;
    states.assign(static_cast<size_t>(s.num_sequences() * kcp_state_floats(s)), 0.f);
    std::copy_n(incoming, kcp_state_floats(s), states.begin());
    ptr = states.data();
  }
};

// Slot j's shape and documents.
struct SlotSpan {
  SpanDocuments docs;
  DeltaRuleShape s;
  SlotSpan(const KcpLayout& layout, const DeltaRuleShape& base, int j)
      : docs(span_documents(layout, layout.span_of(j), base.T)), s(base) {
    s.doc_starts = docs.starts;
  }
};

void check(const KcpLayout& layout, const DeltaRuleShape& s) {
  K3_CHECK(s.doc_starts.empty(), "KCP: a span's documents come from KcpLayout::documents");
  if (!layout.documents.empty())
    kernels::kda::check_doc_starts(s.B, layout.spans() * s.T, layout.documents, "KCP");
}

// For each (row, head): out = M X + add, with M the last K columns of `pair` ([K, V + K] rows),
// X and add [K, V]. out may be X.
void apply_m(const float* pair, const float* X, const float* add, float* out, int64_t K,
             int64_t V) {
  const int64_t W = V + K;
  std::vector<float> tmp(static_cast<size_t>(K * V));
  for (int64_t i = 0; i < K; ++i) {
    float* row = tmp.data() + i * V;
    for (int64_t c = 0; c < V; ++c) row[c] = add ? add[i * W + c] : 0.f;
    for (int64_t j = 0; j < K; ++j) {
      const float m = pair[i * W + V + j];
      const float* x = X + j * V;
      for (int64_t c = 0; c < V; ++c) row[c] += m * x[c];
    }
  }
  std::copy(tmp.begin(), tmp.end(), out);
}

// out = Mᵀ X + add (add [K, V] plain, may be out).
void apply_mt(const float* pair, const float* X, const float* add, float* out, int64_t K,
              int64_t V) {
  const int64_t W = V + K;
  std::vector<float> tmp(add, add + K * V);
  for (int64_t j = 0; j < K; ++j)
    for (int64_t i = 0; i < K; ++i) {
      const float m = pair[i * W + V + j];  // (Mᵀ)[j][i]
      const float* x = X + i * V;
      float* row = tmp.data() + j * V;
      for (int64_t c = 0; c < V; ++c) row[c] += m * x[c];
    }
  std::copy(tmp.begin(), tmp.end(), out);
}

}  // namespace

int64_t kcp_pair_floats(const DeltaRuleShape& s) { return s.B * s.H * s.K * (s.V + s.K); }
int64_t kcp_state_floats(const DeltaRuleShape& s) { return s.B * s.H * s.K * s.V; }

SpanDocuments span_documents(const KcpLayout& layout, int span, int64_t T) {
  SpanDocuments d;
  const int64_t first = span * T;
  d.continued = first;
  if (layout.documents.empty()) return d;
  const std::vector<DocumentRun> runs = document_runs(layout.documents, first, T);
  for (const DocumentRun& r : runs) d.starts.push_back(r.begin);
  d.continued = first - runs.front().start;
  return d;
}

std::vector<SpanDocuments> slot_documents(const KcpLayout& layout, int64_t T) {
  std::vector<SpanDocuments> out;
  for (int j = 0; j < layout.slots; ++j)
    out.push_back(span_documents(layout, layout.span_of(j), T));
  return out;
}

int64_t kcp_records_floats(const KcpLayout& layout, const DeltaRuleShape& s) {
  int64_t n = 0;
  for (int j = 0; j < layout.slots; ++j)
    n += kernels::kda::chunk_saved_floats(SlotSpan(layout, s, j).s);
  return n;
}

void kcp_span_pairs(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in, float* pairs,
                    bool fresh) {
  const PairPass p(s, in, fresh);
  std::vector<float> out(static_cast<size_t>(s.B * s.T * s.H * p.shape.V)),
      last(static_cast<size_t>(s.num_sequences() * s.H * s.K * p.shape.V));
  kernels::kda::chunk_forward(p.shape, p.in, out.data(), last.data(), nullptr);
  std::copy_n(last.begin() + p.pair_offset(), kcp_pair_floats(s), pairs);
}

int KcpLayout::gathered(int c) const {
  if (slots == 1) return c;
  return c < ranks ? c * 2 : (2 * ranks - 1 - c) * 2 + 1;
}

namespace {

// Slot `slot` (of `slots`) of rows laid out [B, slots·T, width], as [B, T, width]; and back.
std::vector<float> slot_rows(const float* x, int64_t B, int64_t T, int slots, int64_t width,
                             int slot) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(B * T * width));
  for (int64_t b = 0; b < B; ++b) {
    const float* at = x + (b * slots + slot) * T * width;
    out.insert(out.end(), at, at + T * width);
  }
  return out;
}
void put_slot_rows(float* x, int64_t B, int64_t T, int slots, int64_t width, int slot,
                   const float* part, bool add) {
  for (int64_t b = 0; b < B; ++b) {
    float* at = x + (b * slots + slot) * T * width;
    const float* from = part + b * T * width;
    for (int64_t i = 0; i < T * width; ++i) at[i] = (add ? at[i] : 0.f) + from[i];
  }
}

// One slot's inputs, contiguous.
struct SlotInputs {
  std::vector<float> q, k, v, g, beta;
  SlotInputs(const DeltaRuleShape& s, int slots, int slot, const DeltaRuleInputs<float>& in)
      : q(slot_rows(in.q, s.B, s.T, slots, s.H * s.K, slot)),
        k(slot_rows(in.k, s.B, s.T, slots, s.H * s.K, slot)),
        v(slot_rows(in.v, s.B, s.T, slots, s.H * s.V, slot)),
        g(slot_rows(in.g, s.B, s.T, slots, s.H * s.K, slot)),
        beta(slot_rows(in.beta, s.B, s.T, slots, s.H, slot)) {}
  DeltaRuleInputs<float> in(const float* initial) const {
    return {q.data(), k.data(), v.data(), g.data(), beta.data(), initial};
  }
};

}  // namespace

void kcp_fold(const DeltaRuleShape& s, const KcpLayout& layout, const float* pairs, int span,
              float* state) {
  const int64_t K = s.K, V = s.V, heads = s.B * s.H, per = kcp_pair_floats(s);
  std::fill(state, state + kcp_state_floats(s), 0.f);
  for (int c = 0; c < span; ++c)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float* pair = pairs + layout.gathered(c) * per + bh * K * (V + K);
      float* S = state + bh * K * V;
      apply_m(pair, S, pair, S, K, V);
    }
}

void kcp_forward(const dist::Comm& cp, const KcpLayout& layout, const DeltaRuleShape& s,
                 const DeltaRuleInputs<float>& in, float* out, const KcpSaved& saved) {
  check(layout, s);
  const int slots = layout.slots;
  const int64_t per = kcp_pair_floats(s), state = kcp_state_floats(s);
  std::vector<SlotInputs> mine;
  std::vector<SlotSpan> spans;
  for (int j = 0; j < slots; ++j) {
    mine.emplace_back(s, slots, j, in);
    spans.emplace_back(layout, s, j);
    kcp_span_pairs(spans[j].s, mine[j].in(nullptr), saved.pairs + (cp.rank() * slots + j) * per,
                   spans[j].docs.fresh());
  }
  {
    ProfileScope time("kda/kcp all-gathers");
    cp.all_gather(saved.pairs, std::vector<int64_t>(static_cast<size_t>(cp.size()), slots * per));
  }
  std::vector<float> o(static_cast<size_t>(s.B * s.T * s.H * s.V));
  float* records = saved.chunk_saved;
  for (int j = 0; j < slots; ++j) {
    float* incoming = saved.incoming + j * state;
    kcp_fold(s, layout, saved.pairs, layout.span_of(j), incoming);
    if (spans[j].docs.fresh()) std::fill(incoming, incoming + state, 0.f);
    const SlotStart start(spans[j].s, incoming);
    kernels::kda::chunk_forward(spans[j].s, mine[j].in(start.ptr), o.data(), nullptr, records);
    records += kernels::kda::chunk_saved_floats(spans[j].s);
    put_slot_rows(out, s.B, s.T, slots, s.H * s.V, j, o.data(), false);
  }
}

void kcp_backward(const dist::Comm& cp, const KcpLayout& layout, const DeltaRuleShape& s,
                  const DeltaRuleInputs<float>& in, const KcpSaved& saved, const float* dout,
                  const DeltaRuleGrads<float>& grads) {
  check(layout, s);
  const int slots = layout.slots, last = layout.spans() - 1;
  const int64_t K = s.K, V = s.V, W = V + K, heads = s.B * s.H, per = kcp_pair_floats(s),
                state = kcp_state_floats(s), rows = s.B * s.T * s.H;
  // Each slot's normal pass, and the gradient of the state it started from.
  std::vector<float> dstates(static_cast<size_t>(state * layout.spans()), 0.f);
  std::vector<SlotInputs> mine;
  std::vector<SlotSpan> spans;
  std::vector<float> dq(static_cast<size_t>(rows * K)), dk(dq.size()), dg(dq.size()),
      dv(static_cast<size_t>(rows * V)), dbeta(static_cast<size_t>(rows));
  const float* records = saved.chunk_saved;
  for (int j = 0; j < slots; ++j) {
    mine.emplace_back(s, slots, j, in);
    spans.emplace_back(layout, s, j);
    const DeltaRuleShape& sj = spans[j].s;
    const std::vector<float> d = slot_rows(dout, s.B, s.T, slots, s.H * V, j);
    // The gradient of every sequence's starting state; the first's is the incoming state's. (The
    // backward reads the states from the records.)
    std::vector<float> dstart(static_cast<size_t>(sj.num_sequences() * s.H * K * V));
    kernels::kda::chunk_backward(
        sj, mine[j].in(nullptr), records, d.data(), nullptr,
        {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dstart.data()});
    records += kernels::kda::chunk_saved_floats(sj);
    if (!spans[j].docs.fresh())  // a span that begins a document never read its incoming state
      std::copy_n(dstart.begin(), state, dstates.begin() + (cp.rank() * slots + j) * state);
    put_slot_rows(grads.dq, s.B, s.T, slots, s.H * K, j, dq.data(), false);
    put_slot_rows(grads.dk, s.B, s.T, slots, s.H * K, j, dk.data(), false);
    put_slot_rows(grads.dv, s.B, s.T, slots, s.H * V, j, dv.data(), false);
    put_slot_rows(grads.dg, s.B, s.T, slots, s.H * K, j, dg.data(), false);
    put_slot_rows(grads.dbeta, s.B, s.T, slots, s.H, j, dbeta.data(), false);
  }
  {
    ProfileScope time("kda/kcp all-gathers");
    cp.all_gather(dstates.data(),
                  std::vector<int64_t>(static_cast<size_t>(cp.size()), slots * state));
  }

  for (int j = 0; j < slots; ++j) {
    const int c = layout.span_of(j);
    if (c == last) continue;  // nothing after the last span reads its pair
    // The transposed fold: T = what every later span's state gradient sends back to this end.
    std::vector<float> T(static_cast<size_t>(state), 0.f);
    for (int later = last; later > c; --later)
      for (int64_t bh = 0; bh < heads; ++bh)
        apply_mt(saved.pairs + layout.gathered(later) * per + bh * K * W, T.data() + bh * K * V,
                 dstates.data() + layout.gathered(later) * state + bh * K * V,
                 T.data() + bh * K * V, K, V);
    // [dS̃ | dM] with dM = T S_inᵀ.
    const float* incoming = saved.incoming + j * state;
    std::vector<float> dpair(static_cast<size_t>(per), 0.f);
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float *t = T.data() + bh * K * V, *sin = incoming + bh * K * V;
      float* d = dpair.data() + bh * K * W;
      for (int64_t i = 0; i < K; ++i) {
        std::copy_n(t + i * V, V, d + i * W);
        for (int64_t k2 = 0; k2 < K; ++k2) {
          float acc = 0;
          for (int64_t x = 0; x < V; ++x) acc += t[i * V + x] * sin[k2 * V + x];
          d[i * W + V + k2] = acc;
        }
      }
    }
    // The pair pass again (recomputed rather than kept), then its backward: [dS̃ | dM] reaches
    // the span's last sequence.
    const PairPass p(spans[j].s, mine[j].in(nullptr), spans[j].docs.fresh());
    std::vector<float> out(static_cast<size_t>(rows * W)),
        recs(static_cast<size_t>(kernels::kda::chunk_saved_floats(p.shape))),
        dlast(static_cast<size_t>(p.shape.num_sequences() * s.H * K * W), 0.f);
    std::copy(dpair.begin(), dpair.end(), dlast.begin() + p.pair_offset());
    kernels::kda::chunk_forward(p.shape, p.in, out.data(), nullptr, recs.data());
    std::fill(out.begin(), out.end(), 0.f);  // the pair pass's outputs feed nothing
    std::vector<float> pdv(static_cast<size_t>(rows * W)), pdvv(static_cast<size_t>(rows * V));
    kernels::kda::chunk_backward(
        p.shape, p.in, recs.data(), out.data(), dlast.data(),
        {dq.data(), dk.data(), pdv.data(), dg.data(), dbeta.data(), nullptr});
    for (int64_t i = 0; i < rows; ++i) std::copy_n(pdv.begin() + i * W, V, pdvv.begin() + i * V);
    put_slot_rows(grads.dk, s.B, s.T, slots, s.H * K, j, dk.data(), true);
    put_slot_rows(grads.dv, s.B, s.T, slots, s.H * V, j, pdvv.data(), true);
    put_slot_rows(grads.dg, s.B, s.T, slots, s.H * K, j, dg.data(), true);
    put_slot_rows(grads.dbeta, s.B, s.T, slots, s.H, j, dbeta.data(), true);
  }
}

}  // namespace k3::model
