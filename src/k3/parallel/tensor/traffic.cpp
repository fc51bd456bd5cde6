#include "k3/parallel/tensor/traffic.h"

#include "k3/model/layer_factory.h"

namespace k3::parallel {

TpTraffic& TpTraffic::operator+=(const TpTraffic& o) {
  all_reduce += o.all_reduce;
  all_gather += o.all_gather;
  reduce_scatter += o.reduce_scatter;
  return *this;
}

TpTraffic tp_micro_batch_traffic(const model::ModelConfig& c, int tp, bool sequence_parallel,
                                 int64_t tokens, bool recomputed) {
  TpTraffic t;
  if (tp == 1) return t;
  const int64_t f = sizeof(float), stream = tokens * c.hidden_size * f;
  // Every layer's two regions, forward (twice when recomputed) and backward; then the embedding's
  // end and the head's start, which under sequence parallelism regathers nothing.
  const int64_t regions = 2 * c.num_hidden_layers, forwards = recomputed ? 2 : 1;
  if (sequence_parallel) {
    t.all_gather += ((forwards + 2) * regions + 2) * stream;
    t.reduce_scatter += ((forwards + 1) * regions + 2) * stream;
  } else {
    t.all_reduce += ((forwards + 1) * regions + 2) * stream;
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (model::ffn_kind(c, l) == model::FfnKind::LatentMoE)
      t.all_reduce += forwards * tokens * c.expert_dim() * f;
  t.all_gather += tp * kernels::kCeStats * tokens * f;
  return t;
}

TpTraffic tp_step_traffic(const model::Model& model, int tp) {
  TpTraffic t;
  if (tp == 1) return t;
  const model::ParamRegistry& p = model.params();
  for (int i = 0; i < p.size(); ++i)
    if (p.info(i).shard.grad_summed_over("tp"))
      t.all_reduce += p.info(i).local_numel() * static_cast<int64_t>(sizeof(float));
  t.all_reduce += sizeof(double);
  return t;
}

TpTraffic tp_traffic_between(const dist::Counters& before, const dist::Counters& after) {
  auto moved = [&](dist::Op op) { return after[op].bytes - before[op].bytes; };
  return {moved(dist::Op::all_reduce), moved(dist::Op::all_gather),
          moved(dist::Op::reduce_scatter)};
}

}  // namespace k3::parallel
