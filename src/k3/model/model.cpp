// Model: its construction and the training and evaluation forward and backward of its stages.
// Its other parts have files of their own: decoding (model_decode.cpp), the MoE layers' router
// balancing (model_balancing.cpp) and the images' placement (model_vision.cpp).
#include "k3/model/model.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/kernels/elementwise.h"
#include "k3/model/layers/tp_region.h"

namespace k3::model {
namespace {
int place_size(const GroupPlaces& places, const char* group) {
  const auto it = places.find(group);
  return it == places.end() ? 1 : it->second.size;
}

// The micro-batch as its mixers take it: each row one sequence, or with packed documents the rows
// end to end as one row.
Sequences sequences(const TokenBatch& b) {
  if (b.doc_starts.empty()) return {b.B, b.T};
  return {1, b.B * b.T, b.doc_starts};
}
}  // namespace

Model::Model(ModelConfig c, const GroupPlaces& places, PipelineSplit split, bool sequence_parallel)
    : Model(std::move(c), false, dist::single_process(), places, std::move(split),
            sequence_parallel) {}

Model::Model(ModelConfig c, bool allocate, const dist::ProcessGrid& grid, PipelineSplit split)
    : Model(std::move(c), allocate, grid, places_of(grid), std::move(split),
            grid.dims().sequence_parallel) {}

Model::Model(ModelConfig c, bool allocate, const dist::ProcessGrid& grid, const GroupPlaces& places,
             PipelineSplit split, bool sequence_parallel)
    : config_(std::move(c)),
      grid_(grid),
      split_(split.layers.empty()
                 ? PipelineSplit::make(config_.num_hidden_layers, place_size(places, "pp"), 1)
                 : std::move(split)),
      sequence_parallel_(sequence_parallel && place_size(places, "tp") > 1),
      params_(places) {
  K3_CHECK(split_.pp == params_.place("pp").size, "the pipeline split is over pp ", split_.pp,
           ", the grid's pp group has ", params_.place("pp").size, " ranks");
  check_tensor_parallel(config_, params_.place("tp").size);
  const int64_t d = config_.hidden_size, V = config_.vocab_size;
  const float std = static_cast<float>(config_.initializer_range),
              eps = static_cast<float>(config_.rms_norm_eps);
  // Under sequence parallelism each tp rank normalizes and mixes only its own tokens, so the
  // residual stream's norms and Attention Residuals have partial gradients, summed over tp.
  const ShardSpec stream = sequence_parallel_ ? ShardSpec::summed("tp") : ShardSpec{};
  params_.set_pp_owner(stage_owner(0));
  embedding_ = VocabEmbedding(params_, "model.embed_tokens.weight", V, d, std);
  if (config_.has_vision()) {
    K3_CHECK(grid.tp().size() == 1 && grid.cp().size() == 1,
             "the vision tower runs without tensor or context parallelism (tp ", grid.tp().size(),
             ", cp ", grid.cp().size(), ")");
    vision_.emplace(params_, config_);
  }
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    params_.set_pp_owner(stage_owner(split_.stage_of_layer(l)));
    layers_.push_back(make_layer(l, stream));
    if (layers_.back().moe) moe_layers_.emplace_back(l, layers_.back().moe);
  }
  tail_first_ = params_.size();
  params_.set_pp_owner(stage_owner(split_.stages() - 1));
  if (attn_res()) output_res_ = AttnResMix(params_, "model.output_attn_res", d, eps, stream);
  final_norm_ = RMSNorm(params_, "model.norm", d, eps, stream);
  head_ = LmHead(params_, "lm_head.weight", V, d, std);
  // The multi-token prediction modules, on the last stage as DeepSeek-V3 places them, in the
  // released checkpoint's tensors (copies of the embedding and the head included).
  for (int64_t i = 0; i < config_.num_nextn_predict_layers; ++i) {
    const int64_t l = config_.num_hidden_layers + i;
    const std::string p = "model.layers." + std::to_string(l);
    mtp_.push_back({VocabEmbedding(params_, p + ".embed_tokens.weight", V, d, std),
                    RMSNorm(params_, p + ".enorm", d, eps, stream),
                    RMSNorm(params_, p + ".hnorm", d, eps, stream),
                    Linear(params_, p + ".eh_proj", 2 * d, d, std), make_layer(l, stream),
                    RMSNorm(params_, p + ".shared_head.norm", d, eps, stream),
                    LmHead(params_, p + ".shared_head.head.weight", V, d, std)});
  }
  params_.set_pp_owner(-1);
  if (allocate) params_.allocate();
}

Model::Layer Model::make_layer(int64_t l, const ShardSpec& stream) {
  const int64_t d = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const std::string p = "model.layers." + std::to_string(l);
  Layer L{l,
          attn_res() && l % config_.attn_res_block_size == 0,
          params_.size(),
          0,
          RMSNorm(params_, p + ".input_layernorm", d, eps, stream),
          RMSNorm(params_, p + ".post_attention_layernorm", d, eps, stream),
          nullptr,
          nullptr,
          {},
          {}};
  if (attn_res()) {
    // self_attention_res has no effect at layer 0
    L.self_res = AttnResMix(params_, p + ".self_attention_res", d, eps, stream);
    L.mlp_res = AttnResMix(params_, p + ".mlp_res", d, eps, stream);
  }
  L.mixer = make_mixer(params_, p, config_, l);
  FfnBlock ffn = make_ffn(params_, p, config_, l);
  L.ffn = std::move(ffn.ffn);
  L.moe = ffn.moe;
  L.params_end = params_.size();
  return L;
}

int Model::stage_owner(int stage) const { return split_.pp > 1 ? split_.rank_of(stage) : -1; }

bool Model::holds_layer(int64_t layer) const {
  const int owner = stage_owner(split_.stage_of_layer(layer));
  return owner < 0 || owner == params_.place("pp").rank;
}

void Model::weights_changed() {
  if (precision_ != kernels::Precision::BF16) return;
  ProfileScope time("bf16 copy of the weights");
  params_.refresh_bf16();
}

Step Model::step(const MicroBatch& mb, bool training) {
  return {mb.arena, mb.acts, params_, training, grid_, mb.id, sequence_parallel_,
          mb.deferred_weight_grads, precision_};
}

int64_t Model::local_rows(int64_t tokens) const {
  return sequence_parallel_ ? tokens / grid_.tp().size() : tokens;
}

const char* Model::ffn_bucket(int64_t layer) const {
  return ffn_kind(config_, layer) == FfnKind::LatentMoE ? "moe" : "dense_mlp";
}

std::string Model::key(const Layer& L, const char* what) const {
  return "model.layers." + std::to_string(L.index) + "." + what;
}

float* Model::embed(const Step& s, const int32_t* tokens, int64_t n) const {
  for (int64_t i = 0; i < n; ++i)
    K3_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size, "token[", i, "] = ", tokens[i],
             " is outside the vocabulary of ", config_.vocab_size);
  float* x = s.alloc(model::local_rows(s, n) * config_.hidden_size);
  embedding_.forward(s, tokens, n, x);
  return x;
}

int64_t Model::banks_before(int64_t layer) const {
  const int64_t size = config_.attn_res_block_size;
  return attn_res() ? (layer + size - 1) / size : 0;
}

int64_t Model::payload_floats(int64_t layer, int64_t tokens) const {
  return (banks_before(layer) + 1) * local_rows(tokens) * config_.hidden_size;
}

void Model::check_stage(const Stage& st) const {
  const int64_t L = config_.num_hidden_layers;
  K3_CHECK(0 <= st.first && st.first <= st.end && st.end <= L, "stage layers [", st.first, ", ",
           st.end, ") outside the model's ", L, " layers");
  K3_CHECK(!st.embedding || st.first == 0, "a stage with the embedding starts at layer 0, not ",
           st.first);
  K3_CHECK(!st.head || st.end == L, "a stage with the head ends at layer ", L, ", not ", st.end);
}

std::vector<const float*> Model::Stream::with(const float* last) const {
  std::vector<const float*> rows = bank;
  rows.push_back(last);
  return rows;
}

// x.P is the running state: the residual stream, or with Attention Residuals the partial sum of
// the current block, whose snapshots at block starts form the bank (math §2). P_in and mid, the
// stream entering each half, are saved for the Attention Residuals' backward and for re-running a
// half; allocated before its segment, they are referenced, never copied. The sums are written
// over the summand that nothing saved (the mixer's or the feed-forward's output).
void Model::run_layer(const Step& s, const Layer& L, Stream& x, int64_t tokens,
                      const MixerCall& mix) const {
  const int64_t d = config_.hidden_size, n = model::local_rows(s, tokens);
  const bool whole = s.acts.granularity() == activation::Granularity::Layer;
  float* F = s.alloc(n * d);
  float* mid = whole ? nullptr : s.alloc(n * d);
  {
    activation::SegmentScope layer = segment(s, L, kMixerHalf, whole);
    if (whole) mid = s.alloc(n * d);
    mixer_half(s, L, x, tokens, mix, mid);
    if (L.starts_block) x.bank.push_back(x.P);
    ffn_half(s, L, x, tokens, mid, F);
  }
  x.P = F;
}

activation::SegmentScope Model::segment(const Step& s, const Layer& L, int half,
                                        bool active) const {
  return {s.acts, s.arena, s.micro_batch,
          {2 * L.index + half, mixer_kind_name(mixer_kind(config_, L.index)), L.index,
           key(L, "")},
          active && s.training};
}

void Model::mixer_half(const Step& s, const Layer& L, const Stream& x, int64_t tokens,
                       const MixerCall& mix, float* mid) const {
  const int64_t d = config_.hidden_size, n = model::local_rows(s, tokens);
  const bool half = s.acts.granularity() == activation::Granularity::Sublayer;
  activation::SegmentScope segment_scope = segment(s, L, kMixerHalf, half);
  float* P = x.P;
  s.save(key(L, "P_in"), P, n * d);
  float* a_in = s.alloc(n * d);
  if (attn_res() && !x.bank.empty()) {
    float* agg = s.alloc(n * d);
    L.self_res.forward(s, x.with(P), n, agg);
    L.input_norm.forward(s, agg, n, a_in);
  } else {
    L.input_norm.forward(s, P, n, a_in);
  }
  {
    ProfileScope time(mixer_kind_name(mixer_kind(config_, L.index)));
    mix(a_in, mid);
  }
  if (!L.starts_block) kernels::add(P, mid, mid, n * d);
  if (attn_res() || half) s.save(key(L, "mid"), mid, n * d);
}

void Model::ffn_half(const Step& s, const Layer& L, const Stream& x, int64_t tokens,
                     const float* mid, float* F) const {
  const int64_t d = config_.hidden_size, n = model::local_rows(s, tokens);
  const bool half = s.acts.granularity() == activation::Granularity::Sublayer;
  activation::SegmentScope segment_scope = segment(s, L, kFfnHalf, half);
  float* m_in = s.alloc(n * d);
  if (attn_res()) {
    float* agg = s.alloc(n * d);
    L.mlp_res.forward(s, x.with(mid), n, agg);
    L.post_norm.forward(s, agg, n, m_in);
  } else {
    L.post_norm.forward(s, mid, n, m_in);
  }
  {
    ProfileScope time(ffn_bucket(L.index));
    L.ffn->forward(s, m_in, tokens, F);
  }
  kernels::add(mid, F, F, n * d);
}

Model::MixerCall Model::mixer_forward(const Step& s, const Layer& L, const TokenBatch& b) const {
  return [&s, &L, &b](const float* a_in, float* A) { L.mixer->forward(s, a_in, sequences(b), A); };
}

float* Model::head_input(const Step& s, const Stream& x, int64_t n) const {
  const int64_t d = config_.hidden_size;
  float* h = x.P;
  if (attn_res()) {
    s.save("model.P_out", x.P, n * d);
    h = s.alloc(n * d);
    output_res_.forward(s, x.with(x.P), n, h);
  }
  float* out = s.alloc(n * d);
  final_norm_.forward(s, h, n, out);
  return out;
}

float* Model::forward_layers(const Step& s, const Stage& st, const TokenBatch& b, const float* in,
                             float* out, const float* image_tokens) const {
  const int64_t n = b.B * b.T, rows = model::local_rows(s, n);
  const int64_t size = rows * config_.hidden_size, nb_in = banks_before(st.first);
  Stream x;
  if (st.embedding) {
    x.P = embed(s, b.tokens, n);
    place_images(s, b, image_tokens, x.P);
  } else {
    // The payload becomes this micro-batch's own: the backward reads its bank entries again.
    const int64_t floats = payload_floats(st.first, n);
    float* own = s.alloc(floats);
    std::memcpy(own, in, static_cast<size_t>(floats) * sizeof(float));
    s.save("model.stage_in", own, floats);
    for (int64_t j = 0; j < nb_in; ++j) x.bank.push_back(own + j * size);
    x.P = own + nb_in * size;
  }
  for (int64_t l = st.first; l < st.end; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    run_layer(s, L, x, n, mixer_forward(s, L, b));
  }
  if (st.head) return head_input(s, x, rows);
  for (size_t j = 0; j < x.bank.size(); ++j)
    std::memcpy(out + static_cast<int64_t>(j) * size, x.bank[j],
                static_cast<size_t>(size) * sizeof(float));
  std::memcpy(out + static_cast<int64_t>(x.bank.size()) * size, x.P,
              static_cast<size_t>(size) * sizeof(float));
  return nullptr;
}

kernels::LossSum Model::head_loss(const Step& s, const float* h, const TokenBatch& b,
                                  float grad_scale, float* dh) const {
  return head_.loss(s, h, b.targets, b.B * b.T, config_.ignore_index, grad_scale, dh);
}

kernels::LossSum Model::forward_stage(const MicroBatch& mb, const Stage& st, const TokenBatch& b,
                                      float grad_scale, const float* in, float* out) {
  check_stage(st);
  const Step s = step(mb, true);
  const float* h = forward_layers(s, st, b, in, out, mb.image_tokens);
  if (!st.head) return {};
  const int64_t n = local_rows(b.B * b.T);
  float* dh = s.alloc(n * config_.hidden_size);
  kernels::LossSum loss;
  {
    ProfileScope time("lm_head");
    loss = head_loss(s, h, b, grad_scale, dh);
  }
  s.save("model.head_grad", dh, n * config_.hidden_size);
  return loss;
}

// Mirrors the forward in reverse. dbank[j] gathers the gradient of bank entry j from every mixing
// point that read it (in this stage, and in later ones through d_out); it flows into P at the
// layer that took the snapshot.
void Model::backward_stage(const MicroBatch& mb, const Stage& st, const TokenBatch& b,
                           const float* d_out, float* d_in, const GradsFinal& grads_final) {
  check_stage(st);
  auto final_now = [&](int first, int end) {
    if (grads_final) grads_final(first, end);
  };
  ArenaScope scratch(mb.arena);
  const Step s = step(mb, true);
  const int64_t n = local_rows(b.B * b.T), d = config_.hidden_size, size = n * d;
  const auto nb_in = static_cast<size_t>(banks_before(st.first));
  const auto nb_out = static_cast<size_t>(banks_before(st.end));
  auto bytes = [size](size_t count) { return count * static_cast<size_t>(size) * sizeof(float); };
  std::vector<const float*> bank;
  if (nb_in > 0) {
    const float* in = s.load("model.stage_in");
    for (size_t j = 0; j < nb_in; ++j) bank.push_back(in + static_cast<int64_t>(j) * size);
  }
  for (int64_t l = st.first; l < st.end; ++l)
    if (layers_[static_cast<size_t>(l)].starts_block)
      bank.push_back(s.load(key(layers_[static_cast<size_t>(l)], "P_in")));
  std::vector<float*> dbank;
  for (size_t j = 0; j < nb_out; ++j) {
    dbank.push_back(s.alloc(size));
    if (d_out)
      std::memcpy(dbank.back(), d_out + static_cast<int64_t>(j) * size, bytes(1));
    else
      std::memset(dbank.back(), 0, bytes(1));
  }
  float *dP = s.alloc(size), *tmp = s.alloc(size), *da_in = s.alloc(size);
  auto rows_of = [&](size_t count, const float* last) {
    std::vector<const float*> rows(bank.begin(), bank.begin() + static_cast<int64_t>(count));
    rows.push_back(last);
    return rows;
  };
  auto grads_of = [&](size_t count, float* last) {
    std::vector<float*> g(dbank.begin(), dbank.begin() + static_cast<int64_t>(count));
    g.push_back(last);
    return g;
  };

  if (st.head) {
    final_norm_.backward(s, s.load("model.head_grad"), n, tmp, false);
    if (attn_res()) {
      std::memset(dP, 0, bytes(1));
      output_res_.backward(s, rows_of(nb_out, s.load("model.P_out")), n, tmp, grads_of(nb_out, dP));
    } else {
      std::swap(dP, tmp);
    }
    final_now(tail_first_,
              params_.size());  // the head was done in the forward; the tail's norms now
  } else {
    std::memcpy(dP, d_out + static_cast<int64_t>(nb_out) * size, bytes(1));
  }
  for (int64_t l = st.end - 1; l >= st.first; --l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    const size_t nb_after = static_cast<size_t>(banks_before(L.index + 1));
    const size_t nb_before = nb_after - (L.starts_block ? 1 : 0);
    // The layer's saved tensors come back (re-running what was recomputed): the whole layer's,
    // or its feed-forward half's, then its mixer half's.
    const bool whole = s.acts.granularity() == activation::Granularity::Layer;
    auto stream_at = [&](size_t banks, const float* P) {
      return Stream{const_cast<float*>(P), {bank.begin(), bank.begin() + static_cast<int64_t>(banks)}};
    };
    auto rerun_mixer = [&] {
      ArenaScope rerun(mb.arena);
      Stream x = stream_at(nb_before, s.load(key(L, "P_in")));
      if (whole)
        run_layer(s, L, x, b.B * b.T, mixer_forward(s, L, b));
      else
        mixer_half(s, L, x, b.B * b.T, mixer_forward(s, L, b), s.alloc(size));
    };
    if (whole) {
      s.acts.restore(mb.id, 2 * L.index + kMixerHalf, rerun_mixer);
    } else {
      s.acts.restore(mb.id, 2 * L.index + kFfnHalf, [&] {
        ArenaScope rerun(mb.arena);
        ffn_half(s, L, stream_at(nb_after, nullptr), b.B * b.T, s.load(key(L, "mid")),
                 s.alloc(size));
      });
    }
    // P_out = mid + ffn(post_norm(mix(bank, mid)))
    {
      ProfileScope time(ffn_bucket(L.index));
      L.ffn->backward(s, dP, b.B * b.T, tmp);
    }
    // The gradients of mid and then of P_in accumulate in place: dP is not read again, and
    // dbank[nb_after - 1] is read by no earlier layer (they reach at most dbank[nb_after - 2]), so
    // no list of gradients below names a buffer twice.
    float* dmid = dP;
    if (attn_res()) {
      L.post_norm.backward(s, tmp, n, da_in, false);
      L.mlp_res.backward(s, rows_of(nb_after, s.load(key(L, "mid"))), n, da_in,
                         grads_of(nb_after, dmid));
    } else {
      L.post_norm.backward(s, tmp, n, dmid, true);
    }
    if (!whole) {
      s.acts.finish(mb.id, 2 * L.index + kFfnHalf);
      s.acts.restore(mb.id, 2 * L.index + kMixerHalf, rerun_mixer);
    }
    // mid = A (a block start) or P_in + A
    {
      ProfileScope time(mixer_kind_name(mixer_kind(config_, L.index)));
      L.mixer->backward(s, dmid, sequences(b), da_in);
    }
    float* dP_in = L.starts_block ? dbank[nb_after - 1] : dmid;
    // a_in = input_norm(P_in), or input_norm(mix(bank, P_in)) once the bank is not empty
    if (attn_res() && nb_before > 0) {
      L.input_norm.backward(s, da_in, n, tmp, false);
      L.self_res.backward(s, rows_of(nb_before, s.load(key(L, "P_in"))), n, tmp,
                          grads_of(nb_before, dP_in));
    } else {
      L.input_norm.backward(s, da_in, n, dP_in, true);
    }
    s.acts.finish(mb.id, 2 * L.index + kMixerHalf);
    dP = dP_in;
    final_now(L.params_first, L.params_end);
  }
  if (st.embedding) {
    if (vision_) {
      images_backward(s, b, dP);
      final_now(vision_->params_first(), vision_->params_end());
    }
    embedding_.backward(s, b.tokens, b.B * b.T, dP);
    final_now(embedding_.weight(), embedding_.weight() + 1);
  } else {
    for (size_t j = 0; j < nb_in; ++j)
      std::memcpy(d_in + static_cast<int64_t>(j) * size, dbank[j], bytes(1));
    std::memcpy(d_in + static_cast<int64_t>(nb_in) * size, dP, bytes(1));
  }
  mb.acts.release(mb.id);
}

kernels::LossSum Model::forward_backward(Arena& arena, activation::ActivationManager& acts,
                                         const TokenBatch& b, float grad_scale,
                                         const GradsFinal& grads_final) {
  ArenaScope scope(arena);
  const MicroBatch mb{0, arena, acts};
  const kernels::LossSum loss = forward_stage(mb, whole(), b, grad_scale, nullptr, nullptr);
  backward_stage(mb, whole(), b, nullptr, nullptr, grads_final);
  return loss;
}

kernels::LossSum Model::forward_loss(Arena& arena, const TokenBatch& b) {
  ArenaScope scope(arena);
  activation::ActivationManager unused;
  const Step s = step({0, arena, unused}, false);
  if (split_.pp > 1) return pipelined_loss(s, b);
  return head_loss(s, forward_layers(s, whole(), b, nullptr, nullptr), b, 1.f, nullptr);
}

// The stages in order, each on its pp rank, the payload passed on by blocking point-to-point (a
// chain: every rank waits only for the stage before it); the last stage's loss goes to every rank.
kernels::LossSum Model::pipelined_loss(const Step& s, const TokenBatch& b) const {
  const dist::Comm& pp = grid_.pp();
  const int64_t n = b.B * b.T;
  double loss[2] = {0, 0};  // sum, count
  for (int st = 0; st < split_.stages(); ++st) {
    if (split_.rank_of(st) != pp.rank()) continue;
    const Stage stage = split_.stage(st);
    float* in = nullptr;
    if (st > 0) {
      const int64_t floats = payload_floats(stage.first, n);
      in = s.alloc(floats);
      pp.recv(in, floats, split_.rank_of(st - 1), st);
    }
    if (stage.head) {
      const kernels::LossSum l =
          head_loss(s, forward_layers(s, stage, b, in, nullptr), b, 1.f, nullptr);
      loss[0] = l.sum;
      loss[1] = static_cast<double>(l.count);
    } else {
      const int64_t floats = payload_floats(stage.end, n);
      float* out = s.alloc(floats);
      forward_layers(s, stage, b, in, out);
      pp.send(out, floats, split_.rank_of(st + 1), st + 1);
    }
  }
  pp.broadcast(loss, 2, split_.rank_of(split_.stages() - 1));
  return {loss[0], static_cast<int64_t>(loss[1])};
}

void Model::forward_logits(Arena& arena, const int32_t* tokens, int64_t B, int64_t T,
                           float* logits) {
  K3_CHECK(split_.pp == 1, "logits of the whole model need every layer on one rank (pp = ",
           split_.pp, ")");
  ArenaScope scope(arena);
  activation::ActivationManager unused;
  const Step s = step({0, arena, unused}, false);
  const float* h = forward_layers(s, whole(), {tokens, nullptr, B, T}, nullptr, nullptr);
  head_.logits(s, TpRegion(s, B * T, config_.hidden_size).enter(h), B * T, logits);
}

}  // namespace k3::model
