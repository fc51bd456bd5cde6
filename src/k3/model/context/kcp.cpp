#include "k3/model/context/kcp.h"

#include <algorithm>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/model/context/documents.h"
#include "k3/model/context/scratch.h"

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
  DeltaRuleInputs<float> in;

  PairPass(Arena& scratch, const DeltaRuleShape& s, const DeltaRuleInputs<float>& base, bool fresh)
      : shape(s) {
    const int64_t K = s.K, V = s.V, W = V + K, rows = s.B * s.T * s.H;
    shape.V = W;
    float* values = scratch_filled(scratch, rows * W);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(base.v + r * V, V, values + r * W);
    float* initial = scratch_filled(scratch, s.num_sequences() * s.H * K * W);
    const int64_t continued = fresh ? 0 : s.doc_starts.empty() ? s.B : 1;
    for (int64_t bh = 0; bh < continued * s.H; ++bh)
      for (int64_t i = 0; i < K; ++i) initial[(bh * K + i) * W + V + i] = 1.f;
    in = {base.q, base.k, values, base.g, base.beta, initial};
  }
  // Where the span's pair lies among the final states: its last sequence's (every row's).
  int64_t pair_offset() const {
    return shape.doc_starts.empty() ? 0 : (shape.num_sequences() - 1) * shape.H * shape.K * shape.V;
  }
};

// The states one slot's normal pass starts from: its incoming state for the sequence it continues
// (zero when it begins a document), zero for the documents that start inside it.
const float* slot_start(Arena& scratch, const DeltaRuleShape& s, const float* incoming) {
  if (s.doc_starts.empty()) return incoming;
  float* states = scratch_filled(scratch, s.num_sequences() * kcp_state_floats(s));
  std::copy_n(incoming, kcp_state_floats(s), states);
  return states;
}

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
// X and add [K, V]. out may be X; tmp holds K·V floats.
void apply_m(const float* pair, const float* X, const float* add, float* out, int64_t K,
             int64_t V, float* tmp) {
  const int64_t W = V + K;
  for (int64_t i = 0; i < K; ++i) {
    float* row = tmp + i * V;
    for (int64_t c = 0; c < V; ++c) row[c] = add ? add[i * W + c] : 0.f;
    for (int64_t j = 0; j < K; ++j) {
      const float m = pair[i * W + V + j];
      const float* x = X + j * V;
      for (int64_t c = 0; c < V; ++c) row[c] += m * x[c];
    }
  }
  std::copy_n(tmp, K * V, out);
}

// out = Mᵀ X + add (add [K, V] plain, may be out); tmp holds K·V floats.
void apply_mt(const float* pair, const float* X, const float* add, float* out, int64_t K,
              int64_t V, float* tmp) {
  const int64_t W = V + K;
  std::copy_n(add, K * V, tmp);
  for (int64_t j = 0; j < K; ++j)
    for (int64_t i = 0; i < K; ++i) {
      const float m = pair[i * W + V + j];  // (Mᵀ)[j][i]
      const float* x = X + i * V;
      float* row = tmp + j * V;
      for (int64_t c = 0; c < V; ++c) row[c] += m * x[c];
    }
  std::copy_n(tmp, K * V, out);
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

void kcp_span_pairs(Arena& scratch, const DeltaRuleShape& s, const DeltaRuleInputs<float>& in,
                    float* pairs, bool fresh) {
  ArenaScope scope(scratch);
  const PairPass p(scratch, s, in, fresh);
  float* out = scratch_floats(scratch, s.B * s.T * s.H * p.shape.V);
  float* last = scratch_floats(scratch, s.num_sequences() * s.H * s.K * p.shape.V);
  kernels::kda::chunk_forward(p.shape, p.in, out, last, nullptr);
  std::copy_n(last + p.pair_offset(), kcp_pair_floats(s), pairs);
}

int KcpLayout::gathered(int c) const {
  if (slots == 1) return c;
  return c < ranks ? c * 2 : (2 * ranks - 1 - c) * 2 + 1;
}

namespace {

// Slot `slot` (of `slots`) of rows laid out [B, slots·T, width], as [B, T, width]; and back.
float* slot_rows(Arena& scratch, const float* x, int64_t B, int64_t T, int slots, int64_t width,
                 int slot) {
  float* out = scratch_floats(scratch, B * T * width);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(x + (b * slots + slot) * T * width, T * width, out + b * T * width);
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
  const float *q, *k, *v, *g, *beta;
  SlotInputs(Arena& scratch, const DeltaRuleShape& s, int slots, int slot,
             const DeltaRuleInputs<float>& in)
      : q(slot_rows(scratch, in.q, s.B, s.T, slots, s.H * s.K, slot)),
        k(slot_rows(scratch, in.k, s.B, s.T, slots, s.H * s.K, slot)),
        v(slot_rows(scratch, in.v, s.B, s.T, slots, s.H * s.V, slot)),
        g(slot_rows(scratch, in.g, s.B, s.T, slots, s.H * s.K, slot)),
        beta(slot_rows(scratch, in.beta, s.B, s.T, slots, s.H, slot)) {}
  DeltaRuleInputs<float> in(const float* initial) const { return {q, k, v, g, beta, initial}; }
};

}  // namespace

void kcp_fold(Arena& scratch, const DeltaRuleShape& s, const KcpLayout& layout, const float* pairs,
              int span, float* state) {
  ArenaScope scope(scratch);
  const int64_t K = s.K, V = s.V, heads = s.B * s.H, per = kcp_pair_floats(s);
  float* tmp = scratch_floats(scratch, K * V);
  std::fill(state, state + kcp_state_floats(s), 0.f);
  for (int c = 0; c < span; ++c)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float* pair = pairs + layout.gathered(c) * per + bh * K * (V + K);
      float* S = state + bh * K * V;
      apply_m(pair, S, pair, S, K, V, tmp);
    }
}

void kcp_forward(Arena& scratch, const dist::Comm& cp, const KcpLayout& layout,
                 const DeltaRuleShape& s, const DeltaRuleInputs<float>& in, float* out,
                 const KcpSaved& saved) {
  check(layout, s);
  ArenaScope scope(scratch);
  const int slots = layout.slots;
  const int64_t per = kcp_pair_floats(s), state = kcp_state_floats(s);
  std::vector<SlotInputs> mine;
  std::vector<SlotSpan> spans;
  for (int j = 0; j < slots; ++j) {
    mine.emplace_back(scratch, s, slots, j, in);
    spans.emplace_back(layout, s, j);
    kcp_span_pairs(scratch, spans[j].s, mine[j].in(nullptr),
                   saved.pairs + (cp.rank() * slots + j) * per, spans[j].docs.fresh());
  }
  {
    ProfileScope time("kcp all-gathers");
    cp.all_gather(saved.pairs, std::vector<int64_t>(static_cast<size_t>(cp.size()), slots * per));
  }
  float* o = scratch_floats(scratch, s.B * s.T * s.H * s.V);
  float* records = saved.chunk_saved;
  for (int j = 0; j < slots; ++j) {
    float* incoming = saved.incoming + j * state;
    kcp_fold(scratch, s, layout, saved.pairs, layout.span_of(j), incoming);
    if (spans[j].docs.fresh()) std::fill(incoming, incoming + state, 0.f);
    const float* start = slot_start(scratch, spans[j].s, incoming);
    kernels::kda::chunk_forward(spans[j].s, mine[j].in(start), o, nullptr, records);
    records += kernels::kda::chunk_saved_floats(spans[j].s);
    put_slot_rows(out, s.B, s.T, slots, s.H * s.V, j, o, false);
  }
}

void kcp_backward(Arena& scratch, const dist::Comm& cp, const KcpLayout& layout,
                  const DeltaRuleShape& s, const DeltaRuleInputs<float>& in, const KcpSaved& saved,
                  const float* dout, const DeltaRuleGrads<float>& grads) {
  check(layout, s);
  ArenaScope scope(scratch);
  const int slots = layout.slots, last = layout.spans() - 1;
  const int64_t K = s.K, V = s.V, W = V + K, heads = s.B * s.H, per = kcp_pair_floats(s),
                state = kcp_state_floats(s), rows = s.B * s.T * s.H;
  // Each slot's normal pass, and the gradient of the state it started from.
  float* dstates = scratch_filled(scratch, state * layout.spans());
  std::vector<SlotInputs> mine;
  std::vector<SlotSpan> spans;
  float *dq = scratch_floats(scratch, rows * K), *dk = scratch_floats(scratch, rows * K),
        *dg = scratch_floats(scratch, rows * K), *dv = scratch_floats(scratch, rows * V),
        *dbeta = scratch_floats(scratch, rows);
  const float* records = saved.chunk_saved;
  for (int j = 0; j < slots; ++j) {
    mine.emplace_back(scratch, s, slots, j, in);
    spans.emplace_back(layout, s, j);
    const DeltaRuleShape& sj = spans[j].s;
    const float* d = slot_rows(scratch, dout, s.B, s.T, slots, s.H * V, j);
    // The gradient of every sequence's starting state; the first's is the incoming state's. (The
    // backward reads the states from the records.)
    float* dstart = scratch_floats(scratch, sj.num_sequences() * s.H * K * V);
    kernels::kda::chunk_backward(sj, mine[j].in(nullptr), records, d, nullptr,
                                 {dq, dk, dv, dg, dbeta, dstart});
    records += kernels::kda::chunk_saved_floats(sj);
    if (!spans[j].docs.fresh())  // a span that begins a document never read its incoming state
      std::copy_n(dstart, state, dstates + (cp.rank() * slots + j) * state);
    put_slot_rows(grads.dq, s.B, s.T, slots, s.H * K, j, dq, false);
    put_slot_rows(grads.dk, s.B, s.T, slots, s.H * K, j, dk, false);
    put_slot_rows(grads.dv, s.B, s.T, slots, s.H * V, j, dv, false);
    put_slot_rows(grads.dg, s.B, s.T, slots, s.H * K, j, dg, false);
    put_slot_rows(grads.dbeta, s.B, s.T, slots, s.H, j, dbeta, false);
  }
  {
    ProfileScope time("kcp all-gathers");
    cp.all_gather(dstates, std::vector<int64_t>(static_cast<size_t>(cp.size()), slots * state));
  }

  for (int j = 0; j < slots; ++j) {
    const int c = layout.span_of(j);
    if (c == last) continue;  // nothing after the last span reads its pair
    ArenaScope span_scope(scratch);
    // The transposed fold: T = what every later span's state gradient sends back to this end.
    float *T = scratch_filled(scratch, state), *tmp = scratch_floats(scratch, K * V);
    for (int later = last; later > c; --later)
      for (int64_t bh = 0; bh < heads; ++bh)
        apply_mt(saved.pairs + layout.gathered(later) * per + bh * K * W, T + bh * K * V,
                 dstates + layout.gathered(later) * state + bh * K * V, T + bh * K * V, K, V, tmp);
    // [dS̃ | dM] with dM = T S_inᵀ.
    const float* incoming = saved.incoming + j * state;
    float* dpair = scratch_filled(scratch, per);
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float *t = T + bh * K * V, *sin = incoming + bh * K * V;
      float* d = dpair + bh * K * W;
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
    const PairPass p(scratch, spans[j].s, mine[j].in(nullptr), spans[j].docs.fresh());
    float* out = scratch_floats(scratch, rows * W);
    float* recs = scratch_floats(scratch, kernels::kda::chunk_saved_floats(p.shape));
    float* dlast = scratch_filled(scratch, p.shape.num_sequences() * s.H * K * W);
    std::copy_n(dpair, per, dlast + p.pair_offset());
    kernels::kda::chunk_forward(p.shape, p.in, out, nullptr, recs);
    std::fill_n(out, rows * W, 0.f);  // the pair pass's outputs feed nothing
    float *pdv = scratch_floats(scratch, rows * W), *pdvv = scratch_floats(scratch, rows * V);
    kernels::kda::chunk_backward(p.shape, p.in, recs, out, dlast,
                                 {dq, dk, pdv, dg, dbeta, nullptr});
    for (int64_t i = 0; i < rows; ++i) std::copy_n(pdv + i * W, V, pdvv + i * V);
    put_slot_rows(grads.dk, s.B, s.T, slots, s.H * K, j, dk, true);
    put_slot_rows(grads.dv, s.B, s.T, slots, s.H * V, j, pdvv, true);
    put_slot_rows(grads.dg, s.B, s.T, slots, s.H * K, j, dg, true);
    put_slot_rows(grads.dbeta, s.B, s.T, slots, s.H, j, dbeta, true);
  }
}

}  // namespace k3::model
