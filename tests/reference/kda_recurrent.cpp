// Driver for kda_recurrent.py: reads WORKDIR/inputs.safetensors (q, k, g [B, T, H, K]; v, dout
// [B, T, H, V]; beta [B, T, H]; initial_state, dfinal_state [N, H, K, V]; metadata "doc_starts",
// comma-separated, empty when each batch row is one sequence), runs the delta rule forward and
// backward three ways: recurrent in double, recurrent in float and chunked (float), and writes
// WORKDIR/double.safetensors, WORKDIR/float.safetensors and WORKDIR/chunked.safetensors (out,
// final_state, dq, dk, dv, dg, dbeta, dinitial_state).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "driver.h"
#include "k3/base/error.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/tensor/safetensors.h"

using namespace k3;
namespace kda = kernels::kda;

template <typename T>
static std::vector<T> widen(const Tensor& t) {
  return std::vector<T>(t.f32(), t.f32() + t.numel());
}

static Tensor narrow(const std::vector<double>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = static_cast<float>(v[i]);
  return t;
}

// Forward and backward of one implementation: (shape, inputs, dout, dfinal_state, out,
// final_state, grads).
template <typename T>
using Kernel = void (*)(const kda::DeltaRuleShape&, const kda::DeltaRuleInputs<T>&, const T*,
                        const T*, T*, T*, const kda::DeltaRuleGrads<T>&);

template <typename T>
static void recurrent(const kda::DeltaRuleShape& s, const kda::DeltaRuleInputs<T>& x, const T* dout,
                      const T* dfinal, T* out, T* final_state,
                      const kda::DeltaRuleGrads<T>& grads) {
  kda::recurrent_forward<T>(s, x, out, final_state);
  kda::recurrent_backward<T>(s, x, dout, dfinal, grads);
}

static void chunked(const kda::DeltaRuleShape& s, const kda::DeltaRuleInputs<float>& x,
                    const float* dout, const float* dfinal, float* out, float* final_state,
                    const kda::DeltaRuleGrads<float>& grads) {
  std::vector<float> saved(kda::chunk_saved_floats(s));
  kda::chunk_forward(s, x, out, final_state, saved.data());
  kda::chunk_backward(s, x, saved.data(), dout, dfinal, grads);
}

template <typename T>
static void run(const Safetensors& in, const kda::DeltaRuleShape& s, Kernel<T> kernel,
                const std::string& path) {
  const int64_t N = s.num_sequences();
  const Shape qs{s.B, s.T, s.H, s.K}, vs{s.B, s.T, s.H, s.V}, bs{s.B, s.T, s.H},
      ss{N, s.H, s.K, s.V};
  const auto q = widen<T>(in.get("q", qs)), k = widen<T>(in.get("k", qs)),
             g = widen<T>(in.get("g", qs));
  const auto v = widen<T>(in.get("v", vs)), dout = widen<T>(in.get("dout", vs));
  const auto beta = widen<T>(in.get("beta", bs));
  const auto init = widen<T>(in.get("initial_state", ss)),
             dfinal = widen<T>(in.get("dfinal_state", ss));
  std::vector<T> out(v.size()), final_state(init.size()), dq(q.size()), dk(q.size()), dv(v.size()),
      dg(q.size()), dbeta(beta.size()), dinit(init.size());
  kernel(s, {q.data(), k.data(), v.data(), g.data(), beta.data(), init.data()}, dout.data(),
         dfinal.data(), out.data(), final_state.data(),
         {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dinit.data()});
  auto f64 = [](const std::vector<T>& a) { return std::vector<double>(a.begin(), a.end()); };
  Safetensors result;
  result.tensors = {
      {"out", narrow(f64(out), vs)},     {"final_state", narrow(f64(final_state), ss)},
      {"dq", narrow(f64(dq), qs)},       {"dk", narrow(f64(dk), qs)},
      {"dv", narrow(f64(dv), vs)},       {"dg", narrow(f64(dg), qs)},
      {"dbeta", narrow(f64(dbeta), bs)}, {"dinitial_state", narrow(f64(dinit), ss)}};
  save_safetensors(path, result);
}

static void run_all(const std::string& dir) {
  const Safetensors in = load_safetensors(dir + "/inputs.safetensors");
  const Tensor* q = in.find("q");
  const Tensor* v = in.find("v");
  K3_CHECK(q && v && q->ndim() == 4 && v->ndim() == 4, "inputs need 4-d tensors q and v");
  std::vector<int64_t> starts;
  std::istringstream list(in.metadata.count("doc_starts") ? in.metadata.at("doc_starts") : "");
  for (std::string item; std::getline(list, item, ',');) starts.push_back(std::stoll(item));
  const kda::DeltaRuleShape s{q->dim(0), q->dim(1), q->dim(2), q->dim(3), v->dim(3), starts};
  run<double>(in, s, recurrent<double>, dir + "/double.safetensors");
  run<float>(in, s, recurrent<float>, dir + "/float.safetensors");
  run<float>(in, s, chunked, dir + "/chunked.safetensors");
}

int main(int argc, char** argv) {
  return k3::reference::driver_main(argc, argv, 1, "WORKDIR",
                                    [](const std::vector<std::string>& a) { run_all(a[0]); });
}
