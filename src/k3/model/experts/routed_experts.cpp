#include "k3/model/experts/routed_experts.h"

#include <algorithm>
#include <cstring>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/strings.h"
#include "k3/base/threads.h"
#include "k3/kernels/gemm.h"

namespace k3::model {
namespace {

// Below this many FLOPs per GEMM, oneDNN's own threads cost more than they save (as in
// gemm_batched): such experts run side by side, one per thread.
constexpr double kSmallGemmFlops = 64e6;

// Runs body(slot, first_row, rows) for each slot with rows, largest first. Many small slots run
// side by side, one per thread (each GEMM then single-threaded); otherwise one after another,
// each GEMM using every thread (base/threads.h). Each slot writes only its own rows and its own
// gradient block: slots never race, and the order they run in does not change the result.
template <typename Body>
void for_each_slot(int slots, const int64_t* first, int64_t gemm_flops_per_row, Body body) {
  std::vector<int> busy;
  for (int k = 0; k < slots; ++k)
    if (first[k + 1] > first[k]) busy.push_back(k);
  std::stable_sort(busy.begin(), busy.end(),
                   [&](int a, int b) { return first[a + 1] - first[a] > first[b + 1] - first[b]; });
  const int64_t n = static_cast<int64_t>(busy.size());
  const double mean_flops =
      n ? static_cast<double>(gemm_flops_per_row * (first[slots] - first[0])) /
              static_cast<double>(n)
        : 0;
  const bool side_by_side = n >= num_threads() && mean_flops < kSmallGemmFlops;
#pragma omp parallel for schedule(dynamic, 1) if (side_by_side)
  for (int64_t i = 0; i < n; ++i) {
    const int k = busy[static_cast<size_t>(i)];
    body(k, first[k], first[k + 1] - first[k]);
  }
}

// y = x Wᵀ, W [out, in]; and its backward (dW += dyᵀ x; dx = dy W, or += when accumulate). Under
// bf16 the weights are converted at each product: a slot's weights may be a replica received
// from another rank, which has no bf16 copy.
void linear(kernels::Precision p, const float* w, const float* x, int64_t rows, int64_t in,
            int64_t out, float* y) {
  kernels::gemm(false, true, rows, out, in, 1.f, x, w, 0.f, y, p);
}
void linear_backward(kernels::Precision p, const float* w, float* dw, const float* x,
                     const float* dy, int64_t rows, int64_t in, int64_t out, float* dx,
                     bool accumulate) {
  kernels::gemm(true, false, out, in, rows, 1.f, dy, x, 1.f, dw, p);
  kernels::gemm(false, false, rows, in, out, 1.f, dy, w, accumulate ? 1.f : 0.f, dx, p);
}

std::vector<int64_t> loads_of(const float* saved, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<int64_t>(saved[i]);
  return out;
}

// Each expert's rows over the ep group, from the loads table [ranks × experts].
std::vector<int64_t> column_sums(const std::vector<int64_t>& loads, int64_t experts) {
  std::vector<int64_t> total(static_cast<size_t>(experts), 0);
  for (size_t i = 0; i < loads.size(); ++i) total[i % static_cast<size_t>(experts)] += loads[i];
  return total;
}

}  // namespace

kernels::MoePermutePlan plan_rows(Arena& arena, const float* ids, int64_t tokens, int64_t k,
                                  int64_t experts) {
  const size_t pairs = static_cast<size_t>(tokens * k);
  int32_t* as_int = arena.allocate_array<int32_t>(pairs);
  for (size_t p = 0; p < pairs; ++p) as_int[p] = static_cast<int32_t>(ids[p]);
  kernels::MoePermutePlan plan{tokens,
                               k,
                               experts,
                               arena.allocate_array<int64_t>(static_cast<size_t>(experts + 1)),
                               arena.allocate_array<int64_t>(pairs),
                               arena.allocate_array<int64_t>(pairs)};
  kernels::moe_permute_plan(as_int, plan);
  return plan;
}

RoutedExperts::RoutedExperts(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c)
    : prefix_(prefix),
      experts_(c.num_experts),
      latent_(c.expert_dim()),
      k_(c.num_experts_per_token),
      act_(glu_params(c)) {
  const GroupPlace ep = reg.place("ep");
  K3_CHECK_CTX(experts_ % ep.size == 0, (ErrorContext{c.source, "num_experts", -1}), experts_,
               " experts do not split evenly over the expert-parallel group of size ", ep.size);
  const float std = static_cast<float>(c.initializer_range), out_std = c.output_init_std();
  const int64_t F = c.moe_intermediate_size, per_rank = experts_ / ep.size;
  const int owner_of_all = ep.size > 1 ? 0 : -1;  // with ep = 1 no tensor has an owner
  for (int64_t e = 0; e < experts_; ++e) {
    const std::string name = str_cat(prefix, ".experts.", std::to_string(e));
    const int owner = owner_of_all < 0 ? -1 : static_cast<int>(e / per_rank);
    weights_.push_back(
        {Linear(reg, str_cat(name, ".w1"), latent_, F, std, LinearMode::column, owner),
         Linear(reg, str_cat(name, ".w3"), latent_, F, std, LinearMode::column, owner),
         Linear(reg, str_cat(name, ".w2"), F, latent_, out_std, LinearMode::row, owner)});
  }
  width_ = reg.info(weights_[static_cast<size_t>(ep.rank * per_rank)][2].weight()).local_shape[1];
}

MoonEpShape RoutedExperts::shape(const Step& s, int64_t rows) const {
  const dist::ParallelDims& d = s.grid.dims();
  return {s.grid.ep().size(), static_cast<int>(experts_), d.moonep ? d.moonep_slots : 0, rows * k_};
}

std::vector<int64_t> RoutedExperts::share_loads(const Step& s,
                                                const kernels::MoePermutePlan& plan) const {
  const dist::Comm& ep = s.grid.ep();
  const int P = ep.size(), me = ep.rank();
  const int64_t E = experts_, per_rank = E / P;
  std::vector<int64_t> loads(static_cast<size_t>(P * E), 0);
  int64_t* mine = loads.data() + me * E;
  for (int64_t e = 0; e < E; ++e) mine[e] = plan.rows(e);
  if (s.grid.dims().moonep) {
    // Every rank's loads, so every rank can make the same plan. Its size never changes.
    const std::vector<int64_t> counts(static_cast<size_t>(P), E);
    ep.all_gather(loads.data(), counts);
    return loads;
  }
  // Baseline: each rank learns how many rows of its own experts each peer routed.
  std::vector<int64_t> in(static_cast<size_t>(P * per_rank));
  const std::vector<int64_t> counts(static_cast<size_t>(P), per_rank);
  ep.all_to_all(mine, counts, in.data(), counts);
  for (int src = 0; src < P; ++src)
    if (src != me)
      std::copy_n(in.data() + src * per_rank, per_rank, loads.data() + src * E + me * per_rank);
  return loads;
}

ExpertExchange RoutedExperts::exchange(const Step& s, const std::vector<int64_t>& loads,
                                       int64_t rows) const {
  const MoonEpShape sh = shape(s, rows);
  if (!s.grid.dims().moonep) return make_exchange(sh, loads, nullptr, s.grid.ep().rank());
  const MoonEpPlan plan = plan_moonep(sh, column_sums(loads, experts_));
  return make_exchange(sh, loads, &plan, s.grid.ep().rank());
}

ExpertExchange RoutedExperts::everything_here() const {
  ExpertExchange x;
  for (int e = 0; e < experts_; ++e) x.slot_expert.push_back(e);
  x.home_slots = static_cast<int>(experts_);
  return x;
}

RoutedExperts::Weights RoutedExperts::slot_weights(const Step& s, const ExpertExchange& x, int k,
                                                   const float* replicas,
                                                   float* replica_grads) const {
  if (k < x.home_slots) {
    const auto& w = weights_[static_cast<size_t>(x.slot_expert[k])];
    return {s.params.value(w[0].weight()).f32(), s.params.value(w[1].weight()).f32(),
            s.params.value(w[2].weight()).f32(), s.params.grad(w[0].weight()).f32(),
            s.params.grad(w[1].weight()).f32(),  s.params.grad(w[2].weight()).f32()};
  }
  const int64_t FL = width_ * latent_, at = (k - x.home_slots) * weight_floats();
  float* g = replica_grads ? replica_grads + at : nullptr;
  return {replicas + at,        replicas + at + FL,      replicas + at + 2 * FL, g,
          g ? g + FL : nullptr, g ? g + 2 * FL : nullptr};
}

void RoutedExperts::compute(const Step& s, const ExpertExchange& x, const int64_t* first,
                            const float* zc, const float* replicas, float* g, float* u,
                            float* y) const {
  const int64_t L = latent_, F = width_;
  ArenaScope scope(s.arena);
  float* h = s.alloc(first[x.slots()] * F);
  for_each_slot(x.slots(), first, 2 * F * L, [&](int k, int64_t at, int64_t n) {
    const Weights w = slot_weights(s, x, k, replicas, nullptr);
    linear(s.precision, w.w1, zc + at * L, n, L, F, g + at * F);
    linear(s.precision, w.w3, zc + at * L, n, L, F, u + at * F);
    kernels::glu_forward(act_, g + at * F, u + at * F, h + at * F, n * F);
    linear(s.precision, w.w2, h + at * F, n, F, L, y + at * L);
  });
}

void RoutedExperts::compute_backward(const Step& s, const ExpertExchange& x, const int64_t* first,
                                     const float* zc, const float* g, const float* u,
                                     const float* dy, const float* replicas, float* replica_grads,
                                     float* dz) const {
  const int64_t L = latent_, F = width_, rows = first[x.slots()];
  ArenaScope scope(s.arena);
  float *h = s.alloc(rows * F), *dh = s.alloc(rows * F), *dg = s.alloc(rows * F),
        *du = s.alloc(rows * F);
  for_each_slot(x.slots(), first, 2 * F * L, [&](int k, int64_t at, int64_t n) {
    const Weights w = slot_weights(s, x, k, replicas, replica_grads);
    const int64_t a = at * F, b = at * L;
    // h is recomputed rather than saved: one cheap elementwise pass for a quarter of the memory.
    kernels::glu_forward(act_, g + a, u + a, h + a, n * F);
    linear_backward(s.precision, w.w2, w.g2, h + a, dy + b, n, F, L, dh + a, false);
    kernels::glu_backward(act_, g + a, u + a, dh + a, dg + a, du + a, n * F);
    linear_backward(s.precision, w.w1, w.g1, zc + b, dg + a, n, L, F, dz + b, false);
    linear_backward(s.precision, w.w3, w.g3, zc + b, du + a, n, L, F, dz + b, true);
  });
}

void RoutedExperts::dispatch(const Step& s, const ExpertExchange& x, const float* sorted,
                             float* computed, int64_t w) const {
  ArenaScope scope(s.arena);
  float *send = s.alloc(x.sent_rows() * w), *recv = s.alloc(x.computed_rows() * w);
  copy_row_blocks(x.pack, sorted, send, w);
  std::vector<int64_t> sc(x.send_rows), rc(x.recv_rows);
  for (int64_t& c : sc) c *= w;
  for (int64_t& c : rc) c *= w;
  s.grid.ep().all_to_all(send, sc, recv, rc);
  copy_row_blocks(x.unpack, recv, computed, w);
}

void RoutedExperts::combine(const Step& s, const ExpertExchange& x, const float* computed,
                            float* sorted, int64_t w) const {
  ArenaScope scope(s.arena);
  float *send = s.alloc(x.computed_rows() * w), *recv = s.alloc(x.sent_rows() * w);
  copy_row_blocks(x.unpack, send, const_cast<float*>(computed), w, true);
  std::vector<int64_t> sc(x.recv_rows), rc(x.send_rows);
  for (int64_t& c : sc) c *= w;
  for (int64_t& c : rc) c *= w;
  s.grid.ep().all_to_all(send, sc, recv, rc);
  copy_row_blocks(x.pack, sorted, recv, w, true);
}

void RoutedExperts::send_replica_weights(const Step& s, const ExpertExchange& x,
                                         float* replicas) const {
  const int64_t W = weight_floats(), FL = width_ * latent_;
  ArenaScope scope(s.arena);
  float* send = s.alloc(x.replica_sends() * W);
  std::vector<int64_t> sc, rc;
  float* at = send;
  for (int q = 0; q < x.ranks; ++q) {
    for (int e : x.weights_to[q]) {
      for (int j = 0; j < 3; ++j)
        std::memcpy(at + j * FL, s.params.value(weights_[e][j].weight()).f32(),
                    static_cast<size_t>(FL) * sizeof(float));
      at += W;
    }
    sc.push_back(static_cast<int64_t>(x.weights_to[q].size()) * W);
    rc.push_back(static_cast<int64_t>(x.weights_from[q].size()) * W);
  }
  s.grid.ep().all_to_all(send, sc, replicas, rc);
}

// The home rank adds each host's gradient for its expert, hosts in rank order: a fixed order.
void RoutedExperts::return_replica_grads(const Step& s, const ExpertExchange& x,
                                         const float* replica_grads) const {
  const int64_t W = weight_floats(), FL = width_ * latent_;
  ArenaScope scope(s.arena);
  float* recv = s.alloc(x.replica_sends() * W);
  std::vector<int64_t> sc, rc;
  for (int q = 0; q < x.ranks; ++q) {
    sc.push_back(static_cast<int64_t>(x.weights_from[q].size()) * W);
    rc.push_back(static_cast<int64_t>(x.weights_to[q].size()) * W);
  }
  s.grid.ep().all_to_all(replica_grads, sc, recv, rc);
  const float* at = recv;
  for (int q = 0; q < x.ranks; ++q)
    for (int e : x.weights_to[q]) {
      for (int j = 0; j < 3; ++j) {
        float* g = s.params.grad(weights_[e][j].weight()).f32();
        for (int64_t i = 0; i < FL; ++i) g[i] += at[j * FL + i];
      }
      at += W;
    }
}

void RoutedExperts::forward(const Step& s, const float* ids, int64_t tokens, const float* z,
                            float* y) const {
  const int64_t L = latent_, F = width_, pairs = tokens * k_;
  if (s.grid.ep().size() == 1) {  // every expert here, computed on the sorted rows directly
    float *g = s.alloc(pairs * F), *u = s.alloc(pairs * F);
    {
      ArenaScope scratch(s.arena);
      const kernels::MoePermutePlan plan = plan_rows(s.arena, ids, tokens, k_, experts_);
      float* zp = s.alloc(pairs * L);
      kernels::moe_permute(plan, z, L, zp);
      compute(s, everything_here(), plan.offsets, zp, nullptr, g, u, y);
    }
    s.save(prefix_ + ".gate", g, pairs * F);
    s.save(prefix_ + ".up", u, pairs * F);
    return;
  }
  float *zc, *g, *u, *rw, *saved_loads;
  ExpertExchange x;
  std::vector<int64_t> plan_loads;  // MoonEP: each expert's rows over the group
  int64_t rows = 0, replicas = 0, nloads = 0;
  {
    ArenaScope scratch(s.arena);
    const kernels::MoePermutePlan plan = plan_rows(s.arena, ids, tokens, k_, experts_);
    const std::vector<int64_t> loads = share_loads(s, plan);
    x = exchange(s, loads, tokens);
    if (s.grid.dims().moonep) plan_loads = column_sums(loads, experts_);
    rows = x.computed_rows();
    replicas = x.slots() - x.home_slots;
    nloads = static_cast<int64_t>(loads.size());
    zc = s.alloc(rows * L);
    g = s.alloc(rows * F);
    u = s.alloc(rows * F);
    rw = s.alloc(replicas * weight_floats());
    saved_loads = s.alloc(nloads);
    for (size_t i = 0; i < loads.size(); ++i) saved_loads[i] = static_cast<float>(loads[i]);
    send_replica_weights(s, x, rw);
    float *zp = s.alloc(pairs * L), *yc = s.alloc(rows * L);
    kernels::moe_permute(plan, z, L, zp);
    dispatch(s, x, zp, zc, L);
    compute(s, x, x.slot_first.data(), zc, rw, g, u, yc);
    combine(s, x, yc, y, L);
    for (auto [p, n] : {std::pair{&zc, rows * L},
                        {&g, rows * F},
                        {&u, rows * F},
                        {&rw, replicas * weight_floats()},
                        {&saved_loads, nloads}})
      scratch.keep(*p, static_cast<size_t>(n));
  }
  s.save(prefix_ + ".expert_in", zc, rows * L);
  s.save(prefix_ + ".gate", g, rows * F);
  s.save(prefix_ + ".up", u, rows * F);
  s.save_exact(prefix_ + ".replica_weights", rw, replicas * weight_floats());
  s.save_exact(prefix_ + ".loads", saved_loads, nloads);
  if (!s.records_statistics()) return;
  totals_.computed_rows += rows;
  totals_.home_rows += x.home_rows;
  totals_.replicas += replicas;
  if (s.grid.dims().moonep) {
    totals_.overflow = std::max(totals_.overflow, rows - pairs);
    totals_.plan_loads.insert(totals_.plan_loads.end(), plan_loads.begin(), plan_loads.end());
  }
  const int64_t P = x.ranks, counts = s.grid.dims().moonep ? P * experts_ : experts_;
  // Forward: the counts, the replica weights, the rows there and back; backward: the rows there
  // and back, the replica gradients.
  totals_.bytes += 8 * counts + 4 * weight_floats() * (x.replica_sends() + replicas) +
                   8 * L * (x.sent_rows() + rows);
}

void RoutedExperts::backward(const Step& s, const kernels::MoePermutePlan& plan, const float* dy,
                             float* dz) const {
  const int64_t L = latent_, pairs = plan.tokens * plan.k;
  const float *g = s.load(prefix_ + ".gate"), *u = s.load(prefix_ + ".up");
  ArenaScope scope(s.arena);
  float* dzp = s.alloc(pairs * L);
  if (s.grid.ep().size() == 1) {
    float* zp = s.alloc(pairs * L);
    kernels::moe_permute(plan, s.load(prefix_ + ".z"), L, zp);
    compute_backward(s, everything_here(), plan.offsets, zp, g, u, dy, nullptr, nullptr, dzp);
  } else {
    const int64_t P = s.grid.ep().size();
    const ExpertExchange x =
        exchange(s, loads_of(s.load(prefix_ + ".loads"), P * experts_), plan.tokens);
    const int64_t rows = x.computed_rows(), replicas = x.slots() - x.home_slots;
    float *dyc = s.alloc(rows * L), *dzc = s.alloc(rows * L);
    float* rg = s.alloc(replicas * weight_floats());
    std::fill(rg, rg + replicas * weight_floats(), 0.f);
    dispatch(s, x, dy, dyc, L);
    compute_backward(s, x, x.slot_first.data(), s.load(prefix_ + ".expert_in"), g, u, dyc,
                     s.load(prefix_ + ".replica_weights"), rg, dzc);
    combine(s, x, dzc, dzp, L);
    return_replica_grads(s, x, rg);
  }
  kernels::moe_permute_backward(plan, dzp, L, dz);
}

DispatchStats RoutedExperts::take_stats(const dist::Comm& ep) const {
  const int P = ep.size();
  std::vector<int64_t> all(static_cast<size_t>(5 * P), 0);
  const DispatchTotals& t = totals_;
  std::copy_n(
      std::array<int64_t, 5>{t.computed_rows, t.home_rows, t.replicas, t.overflow, t.bytes}.begin(),
      5, all.begin() + 5 * ep.rank());
  ep.all_gather(all.data(), std::vector<int64_t>(static_cast<size_t>(P), 5));
  DispatchStats out;
  out.plan_loads = std::move(totals_.plan_loads);  // the same on every rank of the group
  totals_ = {};
  for (int r = 0; r < P; ++r) {
    const int64_t* v = all.data() + 5 * r;
    out.rows.push_back(v[0]);
    out.home_rows.push_back(v[1]);
    out.replicas += v[2];
    out.overflow = std::max(out.overflow, v[3]);
    out.bytes += v[4];
  }
  return out;
}

}  // namespace k3::model
