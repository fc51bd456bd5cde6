#include "k3/model/layers/kda.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/kda/decode.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/kernels/kda/gate.h"
#include "k3/kernels/kda/head_norm.h"
#include "k3/kernels/kda/output_norm.h"
#include "k3/kernels/kda/sequences.h"
#include "k3/kernels/kda/short_conv.h"
#include "k3/model/context/halo.h"
#include "k3/model/context/kcp.h"
#include "k3/model/layers/tp_region.h"

namespace k3::model {
namespace kda = kernels::kda;

namespace {

// dt_bias = softplus⁻¹(dt) = dt + log(1 − e^{−dt}) with dt log-uniform in [1e-3, 0.1], so that the
// unbounded gate starts with decay rates spread over two decades.
ParamInit dt_bias_init() {
  ParamInit p;
  p.kind = ParamInit::Kind::Custom;
  p.fill = [](float* out, int64_t first, int64_t n, uint64_t seed, uint64_t stream) {
    const double lo = std::log(1e-3), hi = std::log(0.1);
    for (int64_t i = 0; i < n; ++i) {
      const double u = philox_uniform(seed, stream, static_cast<uint64_t>(first + i));
      const double dt = std::exp(lo + u * (hi - lo));
      out[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
    }
  };
  return p;
}

// Convolution weights uniform in ±1/sqrt(K_c) (PyTorch's default for a depthwise Conv1d).
ParamInit conv_init(int64_t kernel) {
  ParamInit p;
  p.kind = ParamInit::Kind::Custom;
  const float bound = 1.0f / std::sqrt(static_cast<float>(kernel));
  p.fill = [bound](float* out, int64_t first, int64_t n, uint64_t seed, uint64_t stream) {
    fill_uniform(out, n, seed, stream, static_cast<uint64_t>(first), -bound, bound);
  };
  return p;
}

// The convolution windows one span's packed documents start from: the halo for the document it
// continues, zeros for those that start inside it ([documents, taps, P]), in the step's arena.
float* span_windows(const Step& s, const SpanDocuments& d, const float* halo, int64_t W) {
  const int64_t n = static_cast<int64_t>(d.starts.size()) * W;
  float* w = s.alloc(n);
  std::fill_n(w, n, 0.f);
  std::copy_n(halo, W, w);
  return w;
}

}  // namespace

KimiDeltaAttention::KimiDeltaAttention(ParamRegistry& reg, const std::string& prefix,
                                       const ModelConfig& c)
    : prefix_(prefix),
      hidden_(c.hidden_size),
      heads_(c.kda_num_heads),
      head_dim_(c.kda_head_dim),
      conv_kernel_(c.kda_short_conv_kernel_size),
      bounded_gate_(!c.kda_unbounded_gate),
      lower_bound_(static_cast<float>(c.kda_gate_lower_bound)),
      norm_eps_(static_cast<float>(c.rms_norm_eps)) {
  for (auto [field, v] : {std::pair{"linear_attn_config.num_heads", heads_},
                          {"linear_attn_config.head_dim", head_dim_},
                          {"linear_attn_config.short_conv_kernel_size", conv_kernel_}})
    K3_CHECK_CTX(v > 0, (ErrorContext{c.source, field, -1}),
                 "a KDA layer needs a positive value, found ", v);
  const float std = static_cast<float>(c.initializer_range);
  const int64_t P = heads_ * head_dim_, D = head_dim_;
  // Under tensor parallelism everything per head or per channel follows its heads over tp; f_a_proj
  // and the shared o_norm weight are replicated and feed only this rank's heads (summed).
  const ShardSpec by_heads{0, "tp"};
  q_ = Linear(reg, prefix + ".q_proj", hidden_, P, std, LinearMode::column);
  k_ = Linear(reg, prefix + ".k_proj", hidden_, P, std, LinearMode::column);
  v_ = Linear(reg, prefix + ".v_proj", hidden_, P, std, LinearMode::column);
  q_conv_ =
      reg.add(prefix + ".q_conv1d.weight", {P, 1, conv_kernel_}, conv_init(conv_kernel_), by_heads);
  k_conv_ =
      reg.add(prefix + ".k_conv1d.weight", {P, 1, conv_kernel_}, conv_init(conv_kernel_), by_heads);
  v_conv_ =
      reg.add(prefix + ".v_conv1d.weight", {P, 1, conv_kernel_}, conv_init(conv_kernel_), by_heads);
  f_a_ = Linear(reg, prefix + ".f_a_proj", hidden_, D, std, LinearMode::summed);
  f_b_ = Linear(reg, prefix + ".f_b_proj", D, P, std, LinearMode::column);
  b_ = Linear(reg, prefix + ".b_proj", hidden_, heads_, std, LinearMode::column);
  for (Linear* fp32 : {&f_a_, &f_b_, &b_}) fp32->keep_fp32();
  A_log_ = reg.add(prefix + ".A_log", {heads_}, ParamInit::zeros(), by_heads);
  dt_bias_ = reg.add(prefix + ".dt_bias", {P}, dt_bias_init(), by_heads);
  o_norm_ = reg.add(prefix + ".o_norm.weight", {D}, ParamInit::ones(), ShardSpec::summed("tp"));
  g_ = Linear(reg, prefix + ".g_proj", hidden_, P, std, LinearMode::column);
  o_ = Linear(reg, prefix + ".o_proj", P, hidden_, c.output_init_std(), LinearMode::row);
  heads_ = b_.out();  // this rank's
}

void KimiDeltaAttention::forward(const Step& s, const float* x, const Sequences& seq,
                                 float* out) const {
  run(s, x, seq.B, seq.T, seq.doc_starts, nullptr, out);
}

void KimiDeltaAttention::backward(const Step& s, const float* dout, const Sequences& seq,
                                  float* dx) const {
  run_backward(s, dout, seq.B, seq.T, seq.doc_starts, dx);
}

void KimiDeltaAttention::project(const Step& s, const float* x, int64_t n,
                                 const Projections& out) const {
  q_.forward(s, x, n, out.q);
  k_.forward(s, x, n, out.k);
  v_.forward(s, x, n, out.v);
  f_a_.forward(s, x, n, out.fa);
  b_.forward(s, x, n, out.beta);
  g_.forward(s, x, n, out.gate);
}

void KimiDeltaAttention::run(const Step& s, const float* x, int64_t B, int64_t T,
                             std::span<const int64_t> doc_starts, KdaCache* cache,
                             float* out) const {
  const dist::Comm& cp = s.grid.cp();
  const bool split = cp.size() > 1 && !cache;
  kda::check_doc_starts(B, split ? cp.size() * T : T, doc_starts);
  std::optional<ArenaScope> scope;  // without training nothing outlives this call
  if (!s.training) scope.emplace(s.arena);
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, H = heads_, D = head_dim_, P = H * D;
  const ParamRegistry& pr = s.params;

  float *qp = s.alloc(n * P), *kp = s.alloc(n * P), *vp = s.alloc(n * P);
  float *q = s.alloc(n * P), *k = s.alloc(n * P), *v = s.alloc(n * P);
  float *rq = s.alloc(n * H), *rk = s.alloc(n * H), *fa = s.alloc(n * D), *f = s.alloc(n * P);
  float *g = s.alloc(n * P), *beta = s.alloc(n * H), *gate = s.alloc(n * P);
  {
    ArenaScope scratch(s.arena);  // the gathered input
    project(s, region.enter(x), n, {qp, kp, vp, fa, beta, gate});
  }
  // Under context parallelism this rank's tokens of each sequence are two zig-zag spans
  // (context/kcp.h): each convolution starts from its span's predecessor's last inputs, and the
  // recurrence from the state the earlier spans leave.
  // Decoding (a cache) runs whole on every cp rank: the weights are not split over cp.
  const int64_t taps = conv_kernel_ - 1, W = taps * P, C = T / 2;  // a window; a span's tokens
  const KcpLayout layout{cp.size(), cp.rank(), 2, split ? doc_starts : std::span<const int64_t>{}};
  // With packed documents, the documents of this rank's two spans.
  const std::vector<SpanDocuments> pieces =
      layout.documents.empty() ? std::vector<SpanDocuments>{} : slot_documents(layout, T / 2);
  float* halo = split ? s.alloc(3 * 2 * B * W) : nullptr;
  if (split) conv_halo_forward(s.arena, cp, conv_halo(B, T, pieces), {qp, kp, vp}, halo);
  // Each span is a sequence of its own to the kernels below, started from what came in.
  const kda::ShortConvShape cs = split ? kda::ShortConvShape{2 * B, C, P, conv_kernel_, {}}
                                       : kda::ShortConvShape{B, T, P, conv_kernel_, doc_starts};
  struct Conv {
    const float* in;
    int weight;
    const float* window_in;
    float *window, *out;  // the cache's window is updated in place (short_conv.h allows it)
  };
  for (const Conv& c : {Conv{qp, q_conv_, halo, cache ? cache->q_window.f32() : nullptr, q},
                        Conv{kp, k_conv_, halo ? halo + 2 * B * W : nullptr,
                             cache ? cache->k_window.f32() : nullptr, k},
                        Conv{vp, v_conv_, halo ? halo + 4 * B * W : nullptr,
                             cache ? cache->v_window.f32() : nullptr, v}}) {
    if (!layout.documents.empty()) {  // each span its own packed sequence
      for (int j = 0; j < 2; ++j) {
        const SpanDocuments& d = pieces[static_cast<size_t>(j)];
        ArenaScope scratch(s.arena);
        const float* windows = span_windows(s, d, c.window_in + j * W, W);
        kda::short_conv_forward({1, C, P, conv_kernel_, d.starts}, c.in + j * C * P,
                                pr.value(c.weight).f32(), windows, c.out + j * C * P, nullptr);
      }
      continue;
    }
    kda::short_conv_forward(cs, c.in, pr.value(c.weight).f32(), c.window ? c.window : c.window_in,
                            c.out, c.window);
  }
  kda::l2norm_forward(q, q, rq, n * H, D, 1.0f / std::sqrt(static_cast<float>(D)));
  kda::l2norm_forward(k, k, rk, n * H, D, 1.0f);

  f_b_.forward(s, fa, n, f);
  const kda::GateParams gp{n, H, D, bounded_gate_, lower_bound_};
  kda::gate_forward(gp, f, pr.value(A_log_).f32(), pr.value(dt_bias_).f32(), g);
  kernels::sigmoid(beta, beta, n * H);

  const kda::DeltaRuleShape ds{
      B, T, H, D, D, split ? std::span<const int64_t>{} : doc_starts, s.precision};
  float* o = s.alloc(n * P);
  const kda::DeltaRuleShape span{B, C, H, D, D, {}, s.precision};
  // Under context parallelism each of the two spans keeps its own chunk records.
  const int64_t records = split ? kcp_records_floats(layout, span) : kda::chunk_saved_floats(ds);
  float* chunk_saved = s.training || split ? s.alloc(records) : nullptr;
  const int64_t pair_floats = split ? kcp_pair_floats(span) * layout.spans() : 0,
                state_floats = split ? 2 * kcp_state_floats(span) : 0;
  float* pairs = split ? s.alloc(pair_floats) : nullptr;
  float* incoming = split ? s.alloc(state_floats) : nullptr;
  float* state = cache ? cache->state.f32() : nullptr;  // updated in place (delta_rule.h allows it)
  if (split)
    kcp_forward(s.arena, cp, layout, span, {q, k, v, g, beta, nullptr}, o,
                {pairs, incoming, chunk_saved});
  else
    kda::chunk_forward(ds, {q, k, v, g, beta, state}, o, state, chunk_saved);

  float *y = s.alloc(n * P), *rstd = s.alloc(n * H);
  kda::gated_rmsnorm_forward(o, pr.value(o_norm_).f32(), gate, y, rstd, n * H, D, norm_eps_);
  {
    ArenaScope scratch(s.arena);
    float* partial = region.partial(out);
    o_.forward(s, y, n, partial);
    region.leave(partial, out);
  }

  for (auto [name, ptr, size] : {std::tuple{".x", x, region.rows() * hidden_},
                                 {".qp", qp, n * P},
                                 {".kp", kp, n * P},
                                 {".vp", vp, n * P},
                                 {".q", q, n * P},
                                 {".k", k, n * P},
                                 {".v", v, n * P},
                                 {".fa", fa, n * D},
                                 {".f", f, n * P},
                                 {".g", g, n * P},
                                 {".o", o, n * P},
                                 {".gate", gate, n * P},
                                 {".y", y, n * P},
                                 {".halo", halo, halo ? 3 * 2 * B * W : 0}})
    s.save(prefix_ + name, ptr, size);
  // Per-head statistics and the chunks' recurrent states: small, or compounding through the
  // recurrence, so never stored lossily.
  for (auto [name, ptr, size] : {std::tuple{".beta", beta, n * H},
                                 {".rq", rq, n * H},
                                 {".rk", rk, n * H},
                                 {".rstd", rstd, n * H},
                                 {".chunk_saved", chunk_saved, records},
                                 {".kcp_pairs", pairs, pair_floats},
                                 {".kcp_incoming", incoming, state_floats}})
    s.save_exact(prefix_ + name, ptr, size);
}

// This rank's heads give partial gradients of what they share (x, f_a's output, o_norm); the
// region's end sums dx, the optimizer's reduction the replicated weights' gradients.
void KimiDeltaAttention::run_backward(const Step& s, const float* dout, int64_t B, int64_t T,
                                      std::span<const int64_t> doc_starts, float* dx) const {
  ArenaScope scope(s.arena);
  const TpRegion region(s, B * T, hidden_);
  const int64_t n = B * T, H = heads_, D = head_dim_, P = H * D;
  const ParamRegistry& pr = s.params;
  auto load = [&](const char* name) { return s.load(prefix_ + name); };
  const float *qp = load(".qp"), *kp = load(".kp"), *vp = load(".vp");
  const float *q = load(".q"), *k = load(".k"), *v = load(".v"), *rq = load(".rq"),
              *rk = load(".rk");
  const float *fa = load(".fa"), *f = load(".f"), *g = load(".g"), *beta = load(".beta");
  const float *o = load(".o"), *chunk_saved = load(".chunk_saved"), *gate = load(".gate");
  const float *rstd = load(".rstd"), *y = load(".y");

  float *dy = s.alloc(n * P), *d_o = s.alloc(n * P), *dgate = s.alloc(n * P);
  o_.backward(s, y, region.leave_backward(dout), n, dy, false);
  kda::gated_rmsnorm_backward(o, pr.value(o_norm_).f32(), gate, rstd, dy, d_o,
                              pr.grad(o_norm_).f32(), dgate, n * H, D);

  float *dq = s.alloc(n * P), *dk = s.alloc(n * P), *dv = s.alloc(n * P), *dg = s.alloc(n * P);
  float* dbeta = s.alloc(n * H);
  const dist::Comm& cp = s.grid.cp();
  const bool split = cp.size() > 1;
  const kda::DeltaRuleShape ds{
      B, T, H, D, D, split ? std::span<const int64_t>{} : doc_starts, s.precision};
  const KcpLayout layout{cp.size(), cp.rank(), 2, split ? doc_starts : std::span<const int64_t>{}};
  // With packed documents, the documents of this rank's two spans.
  const std::vector<SpanDocuments> pieces =
      layout.documents.empty() ? std::vector<SpanDocuments>{} : slot_documents(layout, T / 2);
  if (split)
    kcp_backward(s.arena, cp, layout, kda::DeltaRuleShape{B, T / 2, H, D, D, {}, s.precision},
                 {q, k, v, g, beta, nullptr},
                 {const_cast<float*>(load(".kcp_pairs")), const_cast<float*>(load(".kcp_incoming")),
                  const_cast<float*>(chunk_saved)},
                 d_o, {dq, dk, dv, dg, dbeta, nullptr});
  else
    kda::chunk_backward(ds, {q, k, v, g, beta, nullptr}, chunk_saved, d_o, nullptr,
                        {dq, dk, dv, dg, dbeta, nullptr});

  float *df = s.alloc(n * P), *dfa = s.alloc(n * D);
  const kda::GateParams gp{n, H, D, bounded_gate_, lower_bound_};
  kda::gate_backward(gp, f, pr.value(A_log_).f32(), pr.value(dt_bias_).f32(), dg, df,
                     pr.grad(A_log_).f32(), pr.grad(dt_bias_).f32());
  f_b_.backward(s, fa, df, n, dfa, false);
  for (int64_t i = 0; i < n * H; ++i) dbeta[i] *= beta[i] * (1.0f - beta[i]);  // now d(b_proj x)

  // Through the L2 norms (in place) and the convolutions back to the projections.
  kda::l2norm_backward(q, rq, dq, dq, n * H, D, 1.0f / std::sqrt(static_cast<float>(D)));
  kda::l2norm_backward(k, rk, dk, dk, n * H, D, 1.0f);
  const float* xa = region.enter(load(".x"));
  float* partial = region.partial(dx);
  // Each convolution's input gradient; under context parallelism the window each span started
  // from was its predecessor's last inputs, which take that window's gradient.
  const int64_t taps = conv_kernel_ - 1, W = taps * P, C = T / 2;
  const kda::ShortConvShape cs = split ? kda::ShortConvShape{2 * B, C, P, conv_kernel_, {}}
                                       : kda::ShortConvShape{B, T, P, conv_kernel_, doc_starts};
  const float* halo = split ? load(".halo") : nullptr;
  float* dhalo = split ? s.alloc(3 * 2 * B * W) : nullptr;
  float* dproj[3];
  const Linear* proj[3] = {&q_, &k_, &v_};
  const int weight[3] = {q_conv_, k_conv_, v_conv_};
  const float *in[3] = {qp, kp, vp}, *dout_conv[3] = {dq, dk, dv};
  // In one process each projection's backward follows its convolution's, in one buffer; under
  // context parallelism all three wait for the windows' gradients.
  for (int c = 0; c < 3; ++c) {
    dproj[c] = split || c == 0 ? s.alloc(n * P) : dproj[0];
    if (!layout.documents.empty()) {  // each span its own packed sequence, as in forward
      for (int j = 0; j < 2; ++j) {
        const SpanDocuments& d = pieces[static_cast<size_t>(j)];
        ArenaScope scratch(s.arena);
        const float* windows = span_windows(s, d, halo + (c * 2 + j) * W, W);
        float* dwindows = s.alloc(static_cast<int64_t>(d.starts.size()) * W);
        kda::short_conv_backward({1, C, P, conv_kernel_, d.starts}, in[c] + j * C * P,
                                 pr.value(weight[c]).f32(), windows, dout_conv[c] + j * C * P,
                                 nullptr, dproj[c] + j * C * P, pr.grad(weight[c]).f32(), dwindows);
        std::copy_n(dwindows, W, dhalo + (c * 2 + j) * W);
      }
      continue;
    }
    kda::short_conv_backward(cs, in[c], pr.value(weight[c]).f32(),
                             halo ? halo + c * 2 * B * W : nullptr, dout_conv[c], nullptr, dproj[c],
                             pr.grad(weight[c]).f32(), dhalo ? dhalo + c * 2 * B * W : nullptr);
    if (!split) proj[c]->backward(s, xa, dproj[c], n, partial, c > 0);
  }
  if (split) {
    conv_halo_backward(s.arena, cp, conv_halo(B, T, pieces), dhalo, {dproj[0], dproj[1], dproj[2]});
    for (int c = 0; c < 3; ++c) proj[c]->backward(s, xa, dproj[c], n, partial, c > 0);
  }
  f_a_.backward(s, xa, dfa, n, partial, true);
  b_.backward(s, xa, dbeta, n, partial, true);
  g_.backward(s, xa, dgate, n, partial, true);
  region.enter_backward(partial, dx);
}

ConvHalo KimiDeltaAttention::conv_halo(int64_t B, int64_t T,
                                       std::span<const SpanDocuments> pieces) const {
  const int64_t taps = conv_kernel_ - 1, C = T / 2;
  K3_CHECK(T % 2 == 0 && C >= taps, prefix_,
           ": under context parallelism every rank holds two spans of each sequence of at least ",
           taps, " tokens each (got ", T, " tokens)");
  return {B, C, taps, heads_ * head_dim_, pieces};
}

std::unique_ptr<DecodeCache> KimiDeltaAttention::make_cache(int64_t) const {
  return std::make_unique<KdaCache>(make_batch_cache(1));
}

KdaCache KimiDeltaAttention::make_batch_cache(int64_t batch) const {
  const int64_t P = heads_ * head_dim_;
  KdaCache c;
  c.batch = batch;
  for (Tensor* w : {&c.q_window, &c.k_window, &c.v_window})
    *w = Tensor::zeros({batch, conv_kernel_ - 1, P});
  c.state = Tensor::zeros({batch, heads_, head_dim_, head_dim_});
  return c;
}

void KimiDeltaAttention::prefill(const Step& s, const float* x, int64_t T, KdaCache& cache,
                                 float* out) const {
  run(s.inference(), x, cache.batch, T, {}, &cache, out);
  cache.length += T;
}

// The windows and state of sequence b of a cache.
kda::DecodeState KimiDeltaAttention::sequence_state(KdaCache& cache, int64_t b) const {
  const int64_t P = heads_ * head_dim_, W = (conv_kernel_ - 1) * P;
  return {cache.q_window.f32() + b * W, cache.k_window.f32() + b * W, cache.v_window.f32() + b * W,
          cache.state.f32() + b * heads_ * head_dim_ * head_dim_};
}

void KimiDeltaAttention::decode_step(const Step& s, const float* x, KdaCache& cache,
                                     float* out) const {
  std::vector<kda::DecodeState> states;
  for (int64_t b = 0; b < cache.batch; ++b) states.push_back(sequence_state(cache, b));
  step_sequences(s, x, states, out);
  cache.length += 1;
}

// The projections of all rows at once (matrix products), the fused step per sequence and head,
// then o_proj for all rows.
void KimiDeltaAttention::step_sequences(const Step& s, const float* x,
                                        std::span<const kda::DecodeState> states,
                                        float* out) const {
  ArenaScope scope(s.arena);
  const int64_t B = static_cast<int64_t>(states.size()), H = heads_, D = head_dim_, P = H * D;
  const ParamRegistry& pr = s.params;
  float *q = s.alloc(B * P), *k = s.alloc(B * P), *v = s.alloc(B * P), *fa = s.alloc(B * D);
  float *f = s.alloc(B * P), *beta_logit = s.alloc(B * H), *gate = s.alloc(B * P),
        *y = s.alloc(B * P);
  project(s, x, B, {q, k, v, fa, beta_logit, gate});
  f_b_.forward(s, fa, B, f);
  kda::DecodeParams p;
  p.H = H;
  p.D = D;
  p.conv_kernel = conv_kernel_;
  p.bounded_gate = bounded_gate_;
  p.gate_lower_bound = lower_bound_;
  p.norm_eps = norm_eps_;
  p.q_conv = pr.value(q_conv_).f32();
  p.k_conv = pr.value(k_conv_).f32();
  p.v_conv = pr.value(v_conv_).f32();
  p.A_log = pr.value(A_log_).f32();
  p.dt_bias = pr.value(dt_bias_).f32();
  p.o_norm = pr.value(o_norm_).f32();
  kda::decode_step(p, {q, k, v, f, gate, beta_logit}, states, y);
  o_.forward(s, y, B, out);
  TpRegion(s, B, hidden_).leave(out, out);
}

void KimiDeltaAttention::decode_batch(const Step& s, const float* x,
                                      std::span<DecodeCache* const> caches, float* out) const {
  std::vector<kda::DecodeState> states;
  for (DecodeCache* c : caches) {
    auto* cache = dynamic_cast<KdaCache*>(c);
    K3_CHECK(cache && cache->batch == 1, prefix_,
             ": batched decoding needs one sequence's cache from make_cache per row");
    states.push_back(sequence_state(*cache, 0));
  }
  step_sequences(s, x, states, out);
  for (DecodeCache* c : caches) c->length += 1;
}

void KimiDeltaAttention::decode(const Step& s, const float* x, int64_t rows, DecodeCache& base,
                                float* out) const {
  auto& cache = static_cast<KdaCache&>(base);
  K3_CHECK(cache.batch == 1, "decode feeds one sequence; the cache holds ", cache.batch);
  K3_CHECK(rows > 0, "decode needs at least one token");
  if (rows == 1)
    decode_step(s, x, cache, out);
  else
    prefill(s, x, rows, cache, out);
}

}  // namespace k3::model
