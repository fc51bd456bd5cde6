// The lead rank's transfers in one step (math §10): what each process group moves, counted as
// dist/comm.h counts payloads. The k3lab collectives behind each line:
//   replica  the step's token count and loss (parallel/parallel_step.cpp);
//   dp       the gradients' all-reduce (ZeRO-2: reduce-scatter) by bucket, ZeRO's parameter
//            all-gather, ZeRO-2's norm (parallel/zero/grad_sync.cpp, sharded_optimizer.cpp);
//            distributed Muon's blocks to their owners and back (over dp, tp or tp_dp);
//   tp       the tensor-parallel regions (parallel/tensor/traffic.h);
//   cp       the gradients' sum over cp; ring attention's blocks, the short convolutions' halos,
//            KCP's state gathers (model/context/);
//   ep       the norm, the dense gradients' sum over ep; the loads, the routed rows there and
//            back, MoonEP's replicas, the dispatch figures (model/experts/);
//   pp       the loss, the norm, each stage boundary's payload forward and its gradient back.
// Under recomputed activations a layer's forward runs again before its backward, and with it the
// forward's collectives (tp regions, cp's blocks, halos and gathers, ep's loads, rows and
// replicas); the step's figures, norms and the stage boundaries' payloads are not re-sent.
#include "k3/parallel/tensor/traffic.h"

#include <algorithm>
#include <numeric>
#include <span>
#include <tuple>

#include "k3/base/error.h"
#include "k3/model/experts/moonep_plan.h"
#include "k3/model/layer_factory.h"
#include "k3/model/quantile_balancing.h"
#include "k3/optim/optimizer.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/zero/distributed_muon.h"
#include "k3/parallel/zero/shard_layout.h"
#include "k3/planner/plan_internal.h"

namespace k3::planner::detail {
namespace {

using dist::Op;

class Recorder {
 public:
  Recorder(const PlanRequest& r) : r_(r) {}

  // A group of `size` ranks `stride` apart in the grid's rank order crosses nodes when its span
  // does not fit in one.
  void add(const std::string& group, int64_t size, int64_t stride, Op op, const std::string& what,
           double bytes) {
    if (size <= 1 || bytes <= 0) return;
    Transfer t{group, op, what, bytes, size, stride * size > r_.cluster.gpus_per_node};
    if (op == Op::send || op == Op::recv) t.across_nodes = stride >= r_.cluster.gpus_per_node;
    out_.push_back(t);
  }
  std::vector<Transfer> take() { return std::move(out_); }

 private:
  const PlanRequest& r_;
  std::vector<Transfer> out_;
};

constexpr double kScalar = 8;  // an int64 or double

// How many times each layer's forward runs in a step: twice when its activations are recomputed.
double forwards(const PlanRequest& r) { return r.activation == "recompute" ? 2.0 : 1.0; }

int64_t layers_held(const model::Model& m) {
  int64_t n = 0;
  for (int64_t l = 0; l < m.config().num_hidden_layers; ++l) n += m.holds_layer(l) ? 1 : 0;
  return n;
}

// Distributed Muon's point-to-point bytes (sent plus received) of group rank 0 in one step: its
// units and owners as the sharded optimizer makes them on this layout, counted without listing
// every dp rank's pieces of every unit (parallel::muon_p2p_bytes on the parameters).
double muon_p2p_bytes(const PlanRequest& r, const model::Model& lead, int64_t m) {
  const Layout& l = r.layout;
  const optim::ParamSet params = parallel::param_set(lead.params());
  const optim::OptimizerParts parts = optim::split_by_optimizer(
      params, train::optimizer_plan(params.slots, r.model, run_config(r, m).train));
  const parallel::ShardLayout layout(lead.params(), static_cast<int>(l.dp), 0,
                                     static_cast<size_t>(r.bucket_mib * 1024 * 1024 / 4));
  const parallel::ShardLayout held = l.zero == 0 ? layout.alone() : layout;
  return static_cast<double>(parallel::muon_p2p_bytes(parts.muon, parts.block_rows, held,
                                                      static_cast<int>(l.tp), l.zero,
                                                      optim::MuonConfig{}.ns_steps, 0));
}

// One MoE layer's step under measured routing, for ep rank 0: rows computed, replicas of its
// experts sent out, replicas it hosted. Baseline: the rows routed to its experts; MoonEP: each
// micro-batch's plan made again from the loads the run made it from.
std::tuple<int64_t, int64_t, int64_t> measured_dispatch(const PlanRequest& r, const MoeRouting& d,
                                                        int64_t layer, int64_t m, int64_t pairs) {
  const Layout& l = r.layout;
  if (!l.moonep) return {d.home_rows, 0, 0};
  const int64_t E = r.model.num_experts;
  K3_CHECK(static_cast<int64_t>(d.plan_loads.size()) == m * E, "--routing: MoE layer ", layer,
           " has ", d.plan_loads.size(), " MoonEP plan loads, not ", m, " micro-batches x ", E,
           " experts (a run with --moe-dispatch moonep and this batch records them)");
  const model::MoonEpShape shape{static_cast<int>(l.ep), static_cast<int>(E),
                                 static_cast<int>(l.moonep_slots), pairs};
  int64_t computed = 0, sent_out = 0, hosted = 0;
  for (int64_t micro = 0; micro < m; ++micro) {
    const std::span<const int64_t> loads(d.plan_loads.data() + micro * E, static_cast<size_t>(E));
    const int64_t total = std::accumulate(loads.begin(), loads.end(), int64_t{0});
    K3_CHECK(total == l.ep * pairs, "--routing: MoE layer ", layer, ", micro-batch ", micro,
             ": the loads sum to ", total, " rows, not ep x tokens x k = ", l.ep * pairs);
    const model::MoonEpPlan plan = model::plan_moonep(shape, loads);
    computed += plan.rows[0];
    hosted += plan.replicas[0];
    for (int64_t e = 0; e < E / l.ep; ++e)
      sent_out += static_cast<int64_t>(plan.hosts[static_cast<size_t>(e)].size()) - 1;
  }
  return {computed, sent_out, hosted};
}

// Context parallelism (model/context/), for cp rank 0 of a zig-zag layout: the gradients' sum
// over cp; per micro-batch and gated MLA layer ring attention's compressed blocks [c_kv | k_r]
// (cp − 1 hops a forward; backward cp − 1 hops of the blocks and cp of their gradients, each hop
// a send and a receive); per KDA layer the short convolutions' halos (q, k, v: one window of
// kernel − 1 inputs a piece to the next rank and one from it, each forward and the backward) and
// KCP's all-gathers, the span pairs [K, V + K] each forward and the incoming states' gradients
// [K, V] backward, two spans a rank, in fp32.
void context_traffic(Recorder& rec, const PlanRequest& r, const model::Model& lead, int64_t m,
                     int64_t tokens, double held) {
  const Layout& l = r.layout;
  const Precision& p = r.cluster.precision;
  const model::ModelConfig& c = r.model;
  const int64_t cp_stride = l.tp, rows = r.micro_rows;
  rec.add("cp", l.cp, cp_stride, Op::all_reduce, "gradients", held * p.gradient);
  const double F = forwards(r);
  double ring = 0, halo = 0, kcp = 0;  // values, per micro-batch
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (!lead.holds_layer(i)) continue;
    const model::MixerKind k = model::mixer_kind(c, i);
    if (k == model::MixerKind::GatedMLA) {
      ring += (F * static_cast<double>(l.cp - 1) + static_cast<double>(2 * l.cp - 1)) *
              static_cast<double>(tokens * (c.kv_lora_rank + c.qk_rope_head_dim));
    } else if (k == model::MixerKind::KDA) {
      const int64_t width = c.kda_num_heads / l.tp * c.kda_head_dim;  // this rank's H·D
      halo += (F + 1) * static_cast<double>(3 * rows * (c.kda_short_conv_kernel_size - 1) * width);
      kcp += (2 * F + 1) * static_cast<double>(l.cp * 2 * rows * width * c.kda_head_dim);
    }
  }
  const double micro = static_cast<double>(m);
  for (Op op : {Op::send, Op::recv}) {
    rec.add("cp", l.cp, cp_stride, op, "ring attention's latent blocks and their gradients",
            ring * micro * p.activation);
    rec.add("cp", l.cp, cp_stride, op, "short convolutions' halos and their gradients",
            halo * micro * p.activation);
  }
  rec.add("cp", l.cp, cp_stride, Op::all_gather, "KCP span pairs, state gradients",
          kcp * micro * 4);
}

// Expert parallelism (model/experts/routed_experts.cpp), for ep rank 0: the norm and the dense
// gradients' sum over ep; per MoE layer and micro-batch the loads (baseline: E counts to the
// experts' homes; MoonEP: every rank's ep·E gathered) each forward, the rows to their hosts and
// back, each forward and the backward (each rank sends all its k rows a token and returns the rows
// it computed), MoonEP's replica weights out each forward and their gradients home once; per MoE
// layer and step the dispatch figures
// (five a rank). The rows computed and the replicas follow the routing: measured with
// --routing (MoonEP's plans replayed from their loads), else balanced.
void expert_traffic(Recorder& rec, const PlanRequest& r, const model::Model& lead, int64_t m,
                    int64_t tokens, double dense) {
  const Layout& l = r.layout;
  const Precision& p = r.cluster.precision;
  const model::ModelConfig& c = r.model;
  const int64_t ep_stride = l.tp * l.cp, E = c.num_experts,
                pairs = tokens * c.num_experts_per_token;
  const double L = static_cast<double>(c.expert_dim()),
               weights = 3.0 * static_cast<double>(c.moe_intermediate_size / l.tp) * L;
  rec.add("ep", l.ep, ep_stride, Op::all_reduce, "gradient norm", 2 * kScalar);
  rec.add("ep", l.ep, ep_stride, Op::all_reduce, "dense gradients", dense * p.gradient);
  double layers = 0, rows = 0, out = 0, in = 0;  // rows sent + computed; replicas sent, hosted
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (!lead.holds_layer(i) || model::ffn_kind(c, i) != model::FfnKind::LatentMoE) continue;
    ++layers;
    int64_t computed = m * pairs, sent_out = m * l.moonep_slots, hosted = m * l.moonep_slots;
    if (!r.routing.empty()) {
      const auto it = r.routing.find(i);
      K3_CHECK(it != r.routing.end(), "--routing: no dispatch figures for MoE layer ", i);
      std::tie(computed, sent_out, hosted) = measured_dispatch(r, it->second, i, m, pairs);
    }
    if (!l.moonep) sent_out = hosted = 0;
    rows += static_cast<double>(m * pairs + computed);
    out += static_cast<double>(sent_out);
    in += static_cast<double>(hosted);
  }
  const double micro = static_cast<double>(m), F = forwards(r);
  if (l.moonep)
    rec.add("ep", l.ep, ep_stride, Op::all_gather, "expert loads, every rank's",
            F * layers * micro * kScalar * static_cast<double>(l.ep * E));
  else
    rec.add("ep", l.ep, ep_stride, Op::all_to_all, "expert loads",
            F * layers * micro * kScalar * static_cast<double>(E));
  rec.add("ep", l.ep, ep_stride, Op::all_to_all, "routed rows, there and back",
          (F + 1) * rows * L * p.activation);
  rec.add("ep", l.ep, ep_stride, Op::all_to_all, "replica weights out, their gradients home",
          weights * (F * out * p.weight + in * p.gradient));
  rec.add("ep", l.ep, ep_stride, Op::all_gather, "dispatch figures",
          layers * kScalar * 5 * static_cast<double>(l.ep));
}

}  // namespace

std::vector<Transfer> step_traffic(const PlanRequest& r, const model::Model& lead, int64_t m) {
  const Layout& l = r.layout;
  const Precision& p = r.cluster.precision;
  const model::ModelConfig& c = r.model;
  const model::ParamRegistry& reg = lead.params();
  const double micro = static_cast<double>(m);
  const int64_t tokens = r.micro_rows * r.seq / l.cp;  // one micro-batch on one rank
  const int64_t tp_stride = 1, dp_stride = l.tp * l.cp * l.ep, pp_stride = dp_stride * l.dp;
  // Floats of the flat buffer (padding included), of its dense part, of all parameters held.
  const double flat = static_cast<double>(reg.flat_size());
  double dense = 0, held = 0;
  for (int i = 0; i < reg.size(); ++i) {
    held += static_cast<double>(reg.info(i).local_numel());
    if (!reg.info(i).shard.expert_owned()) dense += static_cast<double>(reg.info(i).local_numel());
  }
  const double layer_share =
      static_cast<double>(layers_held(lead)) / static_cast<double>(c.num_hidden_layers);
  Recorder rec(r);

  const int64_t readers = l.cp * l.ep * l.dp;
  rec.add("replica", readers, l.tp, Op::all_reduce, "token count", kScalar);
  rec.add("replica", readers, l.tp, Op::all_reduce, "loss", kScalar);
  // Quantile Balancing sums each MoE layer's histograms (E·bins), loads (E) and token count.
  double moe_layers = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    moe_layers += lead.holds_layer(i) && model::ffn_kind(c, i) == model::FfnKind::LatentMoE;
  rec.add("replica", readers, l.tp, Op::all_reduce, "expert-balancing counts",
          moe_layers * kScalar *
              static_cast<double>(c.num_experts * (model::QuantileBalancer::kBins + 1) + 1));

  rec.add("dp", l.dp, dp_stride, l.zero == 2 ? Op::reduce_scatter : Op::all_reduce, "gradients",
          flat * p.gradient);
  if (l.zero >= 1) rec.add("dp", l.dp, dp_stride, Op::all_gather, "parameters", flat * p.gather);
  if (l.zero == 2) rec.add("dp", l.dp, dp_stride, Op::all_reduce, "gradient norm", kScalar);
  if (r.optimizer == "muon" && (l.tp > 1 || (l.zero >= 1 && l.dp > 1))) {
    // The optimizer's group: dp when tp is 1, else tp under ZeRO 0 and tp_dp under 1 and 2.
    const double p2p = muon_p2p_bytes(r, lead, m) * p.gradient / 4;
    const bool over_dp = l.tp == 1, over_tp = !over_dp && l.zero == 0;
    const std::string group = over_dp ? "dp" : over_tp ? "tp" : "tp_dp";
    const int64_t size = over_dp ? l.dp : over_tp ? l.tp : l.tp * l.dp;
    const int64_t stride = over_dp ? dp_stride : over_tp ? tp_stride : dp_stride / l.tp;
    rec.add(group, size, stride, Op::send, "Muon blocks to their owners, X back (half)", p2p / 2);
    rec.add(group, size, stride, Op::recv, "Muon blocks to their owners, X back (half)", p2p / 2);
  }

  if (l.tp > 1) {
    // Per micro-batch over the whole model; a pipeline rank runs its share of the layers.
    parallel::TpTraffic t = parallel::tp_micro_batch_traffic(
        c, static_cast<int>(l.tp), l.sequence_parallel, tokens, forwards(r) == 2);
    const double scale = micro * p.activation / 4 * (l.pp > 1 ? layer_share : 1.0);
    rec.add("tp", l.tp, tp_stride, Op::all_reduce, "regions' partial sums",
            static_cast<double>(t.all_reduce) * scale);
    rec.add("tp", l.tp, tp_stride, Op::all_gather, "regions' inputs (sp), head statistics",
            static_cast<double>(t.all_gather) * scale);
    rec.add("tp", l.tp, tp_stride, Op::reduce_scatter, "regions' outputs (sp)",
            static_cast<double>(t.reduce_scatter) * scale);
    const parallel::TpTraffic s = parallel::tp_step_traffic(lead, static_cast<int>(l.tp));
    rec.add("tp", l.tp, tp_stride, Op::all_reduce, "summed gradients, norm",
            static_cast<double>(s.all_reduce - static_cast<int64_t>(kScalar)) * p.gradient / 4 +
                kScalar);
  }

  if (l.cp > 1) context_traffic(rec, r, lead, m, tokens, held);
  if (l.ep > 1) expert_traffic(rec, r, lead, m, tokens, dense);

  if (l.pp > 1) {
    rec.add("pp", l.pp, pp_stride, Op::all_reduce, "loss", kScalar);
    rec.add("pp", l.pp, pp_stride, Op::all_reduce, "gradient norm", kScalar);
    // The step's expert-load records gathered to the lead (train/observe/expert_load_gather.h):
    // their lengths, then per rank a layer count and a dispatch count, per MoE layer its number,
    // tokens, expert count and loads, and under ep its rows by rank before and after, replicas,
    // overflow, bytes and MoonEP's plan loads (their count, then per micro-batch each expert's).
    double all_moe = 0;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      all_moe += model::ffn_kind(c, i) == model::FfnKind::LatentMoE;
    if (all_moe > 0) {
      rec.add("pp", l.pp, pp_stride, Op::all_reduce, "expert-load record lengths",
              kScalar * static_cast<double>(l.pp));
      const double per_layer =
          static_cast<double>(3 + c.num_experts) +
          (l.ep > 1 ? static_cast<double>(6 + 2 * l.ep + (l.moonep ? m * c.num_experts : 0)) : 0.0);
      rec.add("pp", l.pp, pp_stride, Op::all_gather, "expert-load records",
              kScalar * (2 * static_cast<double>(l.pp) + all_moe * per_layer));
    }
    // Each chunk receives its input and sends its input's gradient back; sends its output and
    // receives the output's gradient (model payload: the bank entries and the residual stream).
    const model::PipelineSplit& split = lead.pipeline();
    const int64_t rows = l.sequence_parallel && l.tp > 1 ? tokens / l.tp : tokens;
    double sent = 0, received = 0;
    for (int chunk = 0; chunk < split.vp; ++chunk) {
      const int stage = split.pp * chunk;  // pp rank 0's chunks
      const int64_t first = split.first_layer(stage);
      const int64_t end = first + split.layers[static_cast<size_t>(stage)];
      if (stage > 0) {
        const double in = static_cast<double>(lead.payload_floats(first, rows));
        received += in, sent += in;
      }
      if (stage + 1 < split.stages()) {
        const double out = static_cast<double>(lead.payload_floats(end, rows));
        sent += out, received += out;
      }
    }
    rec.add("pp", l.pp, pp_stride, Op::send, "stage outputs, input gradients",
            sent * micro * p.activation);
    rec.add("pp", l.pp, pp_stride, Op::recv, "stage inputs, output gradients",
            received * micro * p.activation);
  }
  return rec.take();
}

}  // namespace k3::planner::detail
