// `k3lab op NAME --inputs IN.safetensors --out OUT.safetensors [--grads DOUT.safetensors]`: one
// KDA kernel on named fp32 tensors, forward and (given output gradients) backward, for checking
// k3lab against other implementations. Names, shapes and scalars: docs/op.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "k3/apps/commands.h"
#include "k3/base/error.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/kernels/kda/gate.h"
#include "k3/kernels/kda/short_conv.h"
#include "k3/tensor/safetensors.h"

namespace k3::apps {
namespace {

namespace kda = kernels::kda;

// A safetensors file of named inputs: every tensor must be one the operation knows, fp32 and
// finite; errors name the file and the tensor.
class NamedTensors {
 public:
  NamedTensors(const std::string& path, const std::vector<std::string>& known) : path_(path) {
    st_ = load_safetensors(path);
    for (const auto& [name, t] : st_.tensors)
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        fail(name, "unexpected tensor: expected only " + list);
      }
  }

  bool has(const std::string& name) const { return st_.find(name) != nullptr; }

  // The tensor with this exact shape, or null when absent.
  const float* optional(const std::string& name, const Shape& shape) const {
    return has(name) ? required(name, shape) : nullptr;
  }
  const float* required(const std::string& name, const Shape& shape) const {
    const Tensor& t = with_rank(name, static_cast<int>(shape.size()));
    if (t.shape() != shape)
      fail(name, "expected shape " + shape_str(shape) + ", found " + shape_str(t.shape()));
    return t.f32();
  }
  // A present, finite fp32 tensor of `rank` positive dimensions (its shape sets the problem's).
  const Tensor& with_rank(const std::string& name, int rank) const {
    const Tensor* t = st_.find(name);
    if (!t) fail(name, "tensor is missing");
    if (t->dtype() != DType::F32)
      fail(name, std::string("expected F32, found ") + dtype_name(t->dtype()));
    bool positive = t->ndim() == rank;
    for (int i = 0; positive && i < rank; ++i) positive = t->dim(i) > 0;
    if (!positive)
      fail(name, "expected " + std::to_string(rank) + " positive dimensions, found " +
                     shape_str(t->shape()));
    for (int64_t i = 0; i < t->numel(); ++i)
      if (!std::isfinite(t->f32()[i]))
        fail(name, "element " + std::to_string(i) + " is not finite (" +
                       std::to_string(t->f32()[i]) + ")");
    return *t;
  }
  // A scalar from the file's metadata, or nullopt when absent.
  std::optional<double> scalar(const std::string& key) const {
    auto it = st_.metadata.find(key);
    if (it == st_.metadata.end()) return std::nullopt;
    double v = NAN;
    try {
      size_t used = 0;
      v = std::stod(it->second, &used);
      if (used != it->second.size()) v = NAN;
    } catch (const std::exception&) {
    }
    if (!std::isfinite(v)) fail(key, "metadata value '" + it->second + "' is not a finite number");
    return v;
  }

  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw Error(what, ErrorContext{path_, name, -1});
  }

 private:
  std::string path_;
  Safetensors st_;
};

Tensor copy_of(const float* p, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::copy(p, p + t.numel(), t.f32());
  return t;
}

struct OpArgs {
  std::string name, inputs, out, grads;
};

// kda-chunk and kda-recurrent: the gated delta rule (delta_rule.h) with q scaled by `scale`.
void delta_rule_op(const OpArgs& a) {
  const NamedTensors in(a.inputs, {"q", "k", "v", "g", "beta", "initial_state"});
  const Shape qs = in.with_rank("q", 4).shape();
  const int64_t B = qs[0], T = qs[1], H = qs[2], K = qs[3];
  const int64_t V = in.with_rank("v", 4).dim(3);
  const Shape vs{B, T, H, V}, state{B, H, K, V};
  const float scale = static_cast<float>(in.scalar("scale").value_or(1.0));
  const float *k = in.required("k", qs), *v = in.required("v", vs), *g = in.required("g", qs);
  const float* beta = in.required("beta", {B, T, H});
  const float* init = in.optional("initial_state", state);
  for (int64_t i = 0; i < B * T * H * K; ++i)
    if (g[i] > 0)
      in.fail("g", "log-decays must be <= 0, found " + std::to_string(g[i]) + " at element " +
                       std::to_string(i));

  Tensor q = copy_of(in.required("q", qs), qs);
  for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] *= scale;
  const kda::DeltaRuleShape s{B, T, H, K, V, {}};
  const kda::DeltaRuleInputs<float> x{q.f32(), k, v, g, beta, init};
  const bool chunked = a.name == "kda-chunk";
  Tensor out = Tensor::empty(vs), final_state = Tensor::empty(state);
  Tensor chunk_saved = Tensor::empty({chunked ? kda::chunk_saved_floats(s) : 0});
  if (chunked)
    kda::chunk_forward(s, x, out.f32(), final_state.f32(), chunk_saved.f32());
  else
    kda::recurrent_forward<float>(s, x, out.f32(), final_state.f32());
  Safetensors result;
  result.tensors = {{"out", out}, {"final_state", final_state}};

  if (!a.grads.empty()) {
    const NamedTensors dy(a.grads, {"dout", "dfinal_state"});
    if (!dy.has("dout") && !dy.has("dfinal_state"))
      dy.fail("dout", "expected dout and/or dfinal_state");
    const float *dout = dy.optional("dout", vs), *dfinal = dy.optional("dfinal_state", state);
    Tensor zeros = Tensor::zeros(vs);
    Tensor dq = Tensor::empty(qs), dk = Tensor::empty(qs), dv = Tensor::empty(vs),
           dg = Tensor::empty(qs), dbeta = Tensor::empty({B, T, H}), dinit = Tensor::empty(state);
    const kda::DeltaRuleGrads<float> d{dq.f32(), dk.f32(),    dv.f32(),
                                       dg.f32(), dbeta.f32(), init ? dinit.f32() : nullptr};
    if (chunked)
      kda::chunk_backward(s, x, chunk_saved.f32(), dout ? dout : zeros.f32(), dfinal, d);
    else
      kda::recurrent_backward<float>(s, x, dout ? dout : zeros.f32(), dfinal, d);
    for (int64_t i = 0; i < dq.numel(); ++i) dq.f32()[i] *= scale;  // back through q · scale
    for (auto& [n, t] : {std::pair{"dq", dq}, {"dk", dk}, {"dv", dv}, {"dg", dg}, {"dbeta", dbeta}})
      result.tensors.emplace_back(n, t);
    if (init) result.tensors.emplace_back("dinitial_state", dinit);
  }
  save_safetensors(a.out, result);
}

// kda-gate: the decay gate (gate.h); metadata lower_bound selects the bounded form.
void gate_op(const OpArgs& a) {
  const NamedTensors in(a.inputs, {"f", "A_log", "dt_bias"});
  const Tensor& f = in.with_rank("f", 3);
  const int64_t H = f.dim(1), D = f.dim(2);
  const std::optional<double> lb = in.scalar("lower_bound");
  if (lb && *lb >= 0)
    in.fail("lower_bound", "expected a negative bound, found " + std::to_string(*lb));
  const kda::GateParams p{f.dim(0), H, D, lb.has_value(), static_cast<float>(lb.value_or(0))};
  const float *A_log = in.required("A_log", {H}), *dt_bias = in.required("dt_bias", {H * D});
  Tensor g = Tensor::empty(f.shape());
  kda::gate_forward(p, f.f32(), A_log, dt_bias, g.f32());
  Safetensors result;
  result.tensors = {{"g", g}};
  if (!a.grads.empty()) {
    const NamedTensors dy(a.grads, {"dg"});
    Tensor df = Tensor::empty(f.shape()), dA = Tensor::zeros({H}), ddt = Tensor::zeros({H * D});
    kda::gate_backward(p, f.f32(), A_log, dt_bias, dy.required("dg", f.shape()), df.f32(), dA.f32(),
                       ddt.f32());
    result.tensors.insert(result.tensors.end(), {{"df", df}, {"dA_log", dA}, {"ddt_bias", ddt}});
  }
  save_safetensors(a.out, result);
}

// short-conv: causal depthwise convolution + SiLU with carry-in windows (short_conv.h).
void short_conv_op(const OpArgs& a) {
  const NamedTensors in(a.inputs, {"x", "weight", "window"});
  const Shape xs = in.with_rank("x", 3).shape();
  const int64_t B = xs[0], T = xs[1], C = xs[2], K = in.with_rank("weight", 3).dim(2);
  const Shape ws{C, 1, K}, win{B, K - 1, C};
  const float *w = in.required("weight", ws), *window = in.optional("window", win);
  const kda::ShortConvShape s{B, T, C, K, {}};
  Tensor y = Tensor::empty(xs), window_out = Tensor::empty(win);
  kda::short_conv_forward(s, in.required("x", xs), w, window, y.f32(), window_out.f32());
  Safetensors result;
  result.tensors = {{"y", y}, {"window", window_out}};
  if (!a.grads.empty()) {
    const NamedTensors dy(a.grads, {"dy", "dwindow"});
    if (!dy.has("dy") && !dy.has("dwindow")) dy.fail("dy", "expected dy and/or dwindow");
    Tensor zeros = Tensor::zeros(xs), dx = Tensor::empty(xs), dw = Tensor::zeros(ws),
           dwin = Tensor::empty(win);
    const float* dyp = dy.optional("dy", xs);
    kda::short_conv_backward(s, in.required("x", xs), w, window, dyp ? dyp : zeros.f32(),
                             dy.optional("dwindow", win), dx.f32(), dw.f32(),
                             window ? dwin.f32() : nullptr);
    result.tensors.insert(result.tensors.end(), {{"dx", dx}, {"dweight", dw}});
    if (window) result.tensors.emplace_back("dwindow", dwin);
  }
  save_safetensors(a.out, result);
}

}  // namespace

void add_op(CLI::App& app) {
  auto a = std::make_shared<OpArgs>();
  auto* cmd = app.add_subcommand("op", "Run one KDA kernel on tensors from a safetensors file");
  cmd->add_option("name", a->name, "kda-chunk, kda-recurrent, kda-gate or short-conv")
      ->required()
      ->check(CLI::IsMember({"kda-chunk", "kda-recurrent", "kda-gate", "short-conv"}));
  cmd->add_option("--inputs", a->inputs, "Input tensors (safetensors)")->required();
  cmd->add_option("--out", a->out, "Where to write the outputs (and input gradients)")->required();
  cmd->add_option("--grads", a->grads, "Output gradients d<output>: also compute d<input>");
  cmd->callback([a] {
    if (a->name == "kda-gate")
      gate_op(*a);
    else if (a->name == "short-conv")
      short_conv_op(*a);
    else
      delta_rule_op(*a);
  });
}

}  // namespace k3::apps
