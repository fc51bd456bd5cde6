// The decoder, with K3's tensor names: embedding → N layers → final RMSNorm → untied LM head
// (and DeepSeek-V3's multi-token prediction modules after it, registered but never run).
// Layer l is [RMSNorm → sequence mixer (gated attention, gated MLA or KDA) → RMSNorm →
// feed-forward (dense GLU MLP or Stable LatentMoE)], joined either by ordinary residual
// connections or, when attn_res_block_size > 0, by Attention Residuals (math §2). The loss comes
// from the fused LM-head + cross-entropy, so the [tokens, vocab] logits never exist in training.
//
// Training runs in stages and micro-batches: a Stage is a range of layers, with the embedding in
// front and the head (final norm, LM head, loss) behind when it holds them; the whole model is
// one stage. Between stages flows a payload (the residual stream, and with Attention Residuals
// the block snapshots taken so far) and, backwards, its gradient. Each micro-batch in flight has
// an id in the activation manager and its own arena, so several can sit between their forward
// and their backward and be released in any order.
//
// Model is implemented in model.cpp (construction, the stages' forward and backward, evaluation),
// model_decode.cpp (decoding), model_balancing.cpp (the MoE layers' router balancing and its
// state), model_vision.cpp (the images' tokens in the sequence) and inventory.cpp (the training
// FLOPs count).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "k3/kernels/cross_entropy.h"
#include "k3/model/config.h"
#include "k3/model/layer_factory.h"
#include "k3/model/layers/attn_res_mix.h"
#include "k3/model/layers/latent_moe.h"
#include "k3/model/layers/norm.h"
#include "k3/model/layers/vocab_parallel.h"
#include "k3/model/pipeline_split.h"
#include "k3/model/vision/vision_tower.h"

namespace k3::model {

struct TokenBatch {
  const int32_t* tokens = nullptr;   // [B, T]
  const int32_t* targets = nullptr;  // [B, T]; ignore_index marks positions without a target
  int64_t B = 0, T = 0;
  // Packed documents: where each starts, over the B rows laid end to end (every row's first
  // position among them; data::document_starts). Under context parallelism (one row) these are
  // the whole sequence's positions, on every cp rank. Empty: each row is one sequence.
  std::span<const int64_t> doc_starts = {};
  // Models with a vision tower: the images [num_images, 3, S, S] whose tokens take the places of
  // the media placeholder tokens, in the order the rows (laid end to end) hold them, each image
  // filling image_tokens() consecutive placeholders.
  const float* images = nullptr;
  int64_t num_images = 0;
};

// Called during the backward with a range [first, end) of parameter indices (registry order)
// whose gradients are final for this micro-batch: nothing later in the backward adds to them.
// Data parallelism starts reducing a bucket as soon as all of its parameters are final.
using GradsFinal = std::function<void(int first, int end)>;

// A pipeline stage: decoder layers [first, end), after the embedding when it holds it (then
// first = 0) and before the head when it holds it (then end = the number of layers).
struct Stage {
  int64_t first = 0, end = 0;
  bool embedding = true, head = true;
};

// One micro-batch in flight: `id` scopes what its forward saves in `acts`; `arena` holds its
// activations from its forward until its backward returns, after which the caller frees them
// (resets the micro-batch's region of an ArenaRegions, or rewinds). Different micro-batches in
// flight at once need different ids and different arenas.
struct MicroBatch {
  int id = 0;
  Arena& arena;
  activation::ActivationManager& acts;
  DeferredWeightGrads* deferred_weight_grads = nullptr;  // Step::deferred_weight_grads
  // The vision tower's tokens for this micro-batch's images when they were computed ahead
  // (encode_images, a pipeline filler); null: the stage with the embedding computes them.
  const float* image_tokens = nullptr;
};

// Every layer's decoding state for one sequence.
struct ModelCache {
  int64_t max_len = 0;  // the most tokens the sequence may reach (make_cache's max_len)
  int64_t length = 0;   // tokens fed so far: the next token's position
  std::vector<std::unique_ptr<DecodeCache>> layers;  // one a decoder layer, from its mixer
};

class Model {
 public:
  // Registers every parameter and, when `allocate`, maps their flat buffers (not initialized).
  // Without allocation the model only describes itself (inventory of the full-size config).
  // `grid` must outlive the model; its groups reach every layer through Step.
  // Under pipeline parallelism (grid pp > 1) each rank holds the parameters of its stages of
  // `split` (default: the layers evenly over pp, one chunk a rank).
  explicit Model(ModelConfig config, bool allocate = true,
                 const dist::ProcessGrid& grid = dist::single_process(), PipelineSplit split = {});
  // Describes, without allocating, the parameters one rank holds at `places` (e.g. rank 0 of a
  // tp group of 4, or pp rank 1 of `split`), without starting those processes: the memory a
  // layout needs per rank. `sequence_parallel`: the residual stream's parameters are registered
  // as under sequence parallelism (gradients summed over tp), as the grid would make them.
  Model(ModelConfig config, const GroupPlaces& places, PipelineSplit split = {},
        bool sequence_parallel = false);
  // Draws every parameter's initial values from `seed` (keyed by name and element index, so the
  // same global weights under every layout).
  void initialize(uint64_t seed) {
    params_.initialize(seed);
    weights_changed();
  }
  // The matrix products' precision (train.precision; fp32 by default). Under bf16 they read the
  // parameters' bf16 copy, which weights_changed() refreshes: call it after every change of the
  // values (an optimizer step, a checkpoint load) before the next forward.
  void set_precision(kernels::Precision p) {
    precision_ = p;
    weights_changed();
  }
  kernels::Precision precision() const { return precision_; }
  void weights_changed();

  const ModelConfig& config() const { return config_; }
  const dist::ProcessGrid& grid() const { return grid_; }
  const PipelineSplit& pipeline() const { return split_; }  // the layers of each virtual stage
  // Whether this rank holds layer `layer`'s parameters (every rank without pipeline parallelism).
  bool holds_layer(int64_t layer) const;
  ParamRegistry& params() { return params_; }
  const ParamRegistry& params() const { return params_; }
  // The kind of layer `layer`'s sequence mixer (0-based).
  MixerKind layer_mixer(int64_t layer) const { return mixer_kind(config_, layer); }

  // One micro-batch through the whole model: forward, loss, backward. Parameter gradients
  // accumulate (they are not zeroed); gradients are those of grad_scale * (sum of token losses).
  // `grads_final`, when set, hears of each range of parameters as soon as the backward is done
  // with it. Leaves arena and acts as it found them.
  kernels::LossSum forward_backward(Arena& arena, activation::ActivationManager& acts,
                                    const TokenBatch& b, float grad_scale,
                                    const GradsFinal& grads_final = {});

  // The stage of all layers with the embedding and the head.
  Stage whole() const { return {0, config_.num_hidden_layers, true, true}; }
  // Floats of the payload entering layer `layer` (= leaving layer - 1) for `tokens` tokens:
  // [bank entries taken before `layer`..., residual stream], each [tokens, hidden].
  int64_t payload_floats(int64_t layer, int64_t tokens) const;
  // The training forward of one stage for micro-batch mb. Reads b.tokens (with the embedding) or
  // `in`, the payload entering stage.first (copied: the caller may reuse it at once). Writes
  // `out`, the payload leaving it, or with the head returns the loss (of b.targets) and keeps its
  // gradient, of grad_scale * (sum of losses), for the backward; without the head the loss is
  // empty. The lm_head gradient accumulates here.
  kernels::LossSum forward_stage(const MicroBatch& mb, const Stage& stage, const TokenBatch& b,
                                 float grad_scale, const float* in, float* out);
  // Its backward: reads `d_out`, the gradient of the payload the forward wrote (not with the
  // head); writes `d_in`, the gradient of the payload it read (not with the embedding); parameter
  // gradients accumulate. Releases mb's saved tensors; mb.arena's activations are the caller's
  // to free. b gives B and T, and with the embedding the tokens again.
  void backward_stage(const MicroBatch& mb, const Stage& stage, const TokenBatch& b,
                      const float* d_out, float* d_in, const GradsFinal& grads_final = {});
  // The vision tower's forward for b's images, ahead of the stage with the embedding (a pipeline
  // filler node): their tokens [b.num_images · image_tokens, hidden], in mb.arena, saving what the
  // backward of that stage reads. Pass them as mb.image_tokens to forward_stage.
  const float* encode_images(const MicroBatch& mb, const TokenBatch& b);
  bool has_vision() const { return vision_.has_value(); }  // whether the config has a vision tower
  // Evaluation: the summed loss, nothing saved, no gradients. Under pipeline parallelism every pp
  // rank calls it: the stages run in order and every rank gets the loss.
  kernels::LossSum forward_loss(Arena& arena, const TokenBatch& b);
  // Full logits [B*T, vocab] (tests and small-scale inspection only; not under pp).
  void forward_logits(Arena& arena, const int32_t* tokens, int64_t B, int64_t T, float* logits);

  // Empty decoding state for one sequence of at most max_len tokens.
  ModelCache make_cache(int64_t max_len) const;
  // Feeds n tokens of one sequence at positions cache.length..; writes the logits of the last one
  // [vocab]. Runs the same per-layer steps as the forward, with each mixer's decode.
  void decode(Arena& arena, ModelCache& cache, const int32_t* tokens, int64_t n, float* logits);
  // decode for several sequences at once (prompts of any lengths): sequence b's lengths[b] tokens
  // follow sequence b-1's in tokens and go at positions caches[b]->length..; logits [B, vocab] of
  // each one's last token. Each mixer runs sequence by sequence on its cache; the feed-forwards,
  // norms and residuals run once over every row, their products B sequences tall.
  void prefill(Arena& arena, std::span<ModelCache* const> caches, const int32_t* tokens,
               std::span<const int64_t> lengths, float* logits);
  // One token of each of caches.size() sequences, each at its own position (its cache's length):
  // tokens [B], logits [B, vocab]. Every matrix product runs once for all B rows; each sequence's
  // attention and recurrence read only its own cache.
  void decode_batch(Arena& arena, std::span<ModelCache* const> caches, const int32_t* tokens,
                    float* logits);

  // Router balancing, once per global batch after the optimizer step: every MoE layer updates
  // its router bias from the counts of the training forwards; returns the load statistics by
  // 0-based layer. `reduce` sums the counts across data-parallel ranks (none for one process).
  std::map<int64_t, ExpertLoadStats> end_global_batch(const CountReducer& reduce = nullptr);
  // Instead, after a step skipped as non-finite: the counts of its forwards dropped, no bias moved.
  void discard_global_batch();
  // Per MoE layer, how its rows were dispatched over ep since the last call (collective over ep).
  std::map<int64_t, DispatchStats> take_dispatch_stats() const;
  // The balancers' state, for checkpoints: Quantile Balancing's range, one [2] tensor per MoE layer
  // (the bias balancer has none beside the bias). Under pipeline parallelism each comes from its
  // layer's stage (collective over pp).
  std::vector<std::pair<std::string, Tensor>> balancer_state() const;
  // Takes that state back from `tensors` (found by name); `origin`, the checkpoint, names the
  // source in the error when a layer's state is missing.
  void restore_balancer_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::string& origin);

  // Training FLOPs per token at T tokens a sequence: 6 × matmul_params() + the sequence mixers'
  // FLOPs (mixing_flops_per_token). Both are defined beside the parameter counts, in
  // inventory.cpp, whose header states the formula.
  double train_flops_per_token(int64_t T) const;
  // The matrix parameters a token passes through: every 2-D weight but the embedding tables, the
  // routed experts' counted for the k of E a token visits.
  int64_t matmul_params() const;

  // The rows of a micro-batch of `tokens` tokens this rank holds between layers: all of them, or
  // under sequence parallelism its slice.
  int64_t local_rows(int64_t tokens) const;

 private:
  // What both public constructors do: `places` gives this rank's place in each group (from the
  // grid, or described).
  Model(ModelConfig config, bool allocate, const dist::ProcessGrid& grid, const GroupPlaces& places,
        PipelineSplit split, bool sequence_parallel);
  int stage_owner(int stage) const;  // the pp rank holding a virtual stage, -1 without pp

  // One decoder layer: input_norm → mixer, post_norm → ffn (model.layers.<index>.*).
  struct Layer {
    int64_t index;                         // 0-based
    bool starts_block;                     // Attention Residuals: the layer opens a new block
    int params_first = 0, params_end = 0;  // the layer's parameters, in registry order
    RMSNorm input_norm, post_norm;         // before the mixer; before the feed-forward
    std::unique_ptr<Mixer> mixer;
    std::unique_ptr<FeedForward> ffn;
    // Only with Attention Residuals: the mixes of the bank and the stream that feed input_norm
    // (self_attention_res) and post_norm (mlp_res).
    AttnResMix self_res, mlp_res;
    LatentMoE* moe = nullptr;  // ffn, when it is a LatentMoE
  };
  // Registers decoder layer l's parameters (the stream's norms and mixes sharded as `stream`).
  Layer make_layer(int64_t l, const ShardSpec& stream);
  // A multi-token prediction module of DeepSeek-V3 (model.layers.<N + i>.*), registered as the
  // released checkpoint holds it: described (inventory, FLOPs, memory), never run.
  struct MtpModule {
    VocabEmbedding embedding;  // a copy of the model's
    RMSNorm enorm, hnorm;      // of the embedding and of the last layer's output
    Linear eh_proj;            // [d, 2d] over the two, concatenated
    Layer layer;
    RMSNorm head_norm;
    LmHead head;  // a copy of lm_head
  };
  // The state between layers (math §2): the stream P (with Attention Residuals the current
  // block's partial sum) and the bank of snapshots taken at block starts.
  struct Stream {
    float* P = nullptr;
    std::vector<const float*> bank;
    std::vector<const float*> with(const float* last) const;  // the bank, then `last`
  };
  // The sequence mixing of one layer: (normalized input, output), both [n, hidden].
  using MixerCall = std::function<void(const float* a_in, float* out)>;

  // Decoding: layer L's mixer on (normalized input, output) [rows, hidden] with its caches.
  using DecodeMixer =
      std::function<void(const Step& s, const Layer& L, const float* a_in, float* out)>;
  // The decoding forward of n tokens with `mix` as every layer's mixer: the logits of the rows
  // listed in logit_rows (increasing), one after another.
  void run_decode(Arena& arena, const int32_t* tokens, int64_t n, float* logits,
                  const DecodeMixer& mix, std::span<const int64_t> logit_rows);
  // One decoder layer on n tokens, advancing x; `mix` runs the layer's mixer (forward or decode).
  // Under the activation manager each layer is a segment, or each half of one (its granularity):
  // the layer's forward, and any re-run of it before its backward, is this code.
  void run_layer(const Step& s, const Layer& L, Stream& x, int64_t n, const MixerCall& mix) const;
  static constexpr int kMixerHalf = 0, kFfnHalf = 1;  // segment 2·layer + half
  // The activation segment of L's half `half`; it records only when `active` and training.
  activation::SegmentScope segment(const Step& s, const Layer& L, int half, bool active) const;
  // The stream x.P (with the bank before the layer's snapshot) -> mid.
  void mixer_half(const Step& s, const Layer& L, const Stream& x, int64_t tokens,
                  const MixerCall& mix, float* mid) const;
  // mid (with the bank after it) -> the layer's output F.
  void ffn_half(const Step& s, const Layer& L, const Stream& x, int64_t tokens, const float* mid,
                float* F) const;
  // L's training or evaluation mixer forward on b's sequences, as run_layer calls it.
  MixerCall mixer_forward(const Step& s, const Layer& L, const TokenBatch& b) const;
  // Output mixing and the final norm: the LM head's input [n, hidden].
  float* head_input(const Step& s, const Stream& x, int64_t n) const;
  // The training or evaluation forward of a stage's layers: returns the head input with the head,
  // else writes the payload `out` and returns null.
  float* forward_layers(const Step& s, const Stage& stage, const TokenBatch& b, const float* in,
                        float* out, const float* image_tokens = nullptr) const;
  // The placeholder positions of b (checked against its images), and the image tokens put there:
  // those computed `ahead` (a filler), or the tower's now.
  std::vector<int64_t> placeholders(const TokenBatch& b) const;
  const float* tower_tokens(const Step& s, const TokenBatch& b) const;  // the tower's forward
  void place_images(const Step& s, const TokenBatch& b, const float* ahead, float* x) const;
  // The images' share of the backward: their rows of dx go to the tower (and are zeroed there).
  void images_backward(const Step& s, const TokenBatch& b, float* dx) const;
  // The fused LM head + cross-entropy; dh and the lm_head gradient only when dh is not null.
  kernels::LossSum head_loss(const Step& s, const float* h, const TokenBatch& b, float grad_scale,
                             float* dh) const;
  // The n tokens' embeddings (checked against the vocabulary), this rank's rows [rows, hidden].
  float* embed(const Step& s, const int32_t* tokens, int64_t n) const;
  // forward_loss under pipeline parallelism: every stage on its pp rank in turn.
  kernels::LossSum pipelined_loss(const Step& s, const TokenBatch& b) const;
  int64_t banks_before(int64_t layer) const;       // bank entries taken before layer `layer`
  void check_stage(const Stage& stage) const;      // throws unless a stage fits the model
  Step step(const MicroBatch& mb, bool training);  // what the layers see of mb
  bool attn_res() const { return config_.attn_res_block_size > 0; }  // Attention Residuals?
  // The name of L's saved tensor `what`: model.layers.<index>.<what>.
  std::string key(const Layer& L, const char* what) const;
  const char* ffn_bucket(int64_t layer) const;  // profile bucket of layer's feed-forward

  ModelConfig config_;
  const dist::ProcessGrid& grid_;
  PipelineSplit split_;
  bool sequence_parallel_;  // asked for, and tp > 1: between layers a rank holds its rows only
  ParamRegistry params_;
  kernels::Precision precision_ = kernels::Precision::F32;
  VocabEmbedding embedding_;
  std::optional<VisionTower> vision_;  // with the config's vision tower
  LmHead head_;
  int tail_first_ = 0;  // the first parameter after the layers (output mixing, final norm, head)
  std::vector<Layer> layers_;
  std::vector<MtpModule> mtp_;
  // (layer, the layer's MoE) for balancing
  std::vector<std::pair<int64_t, LatentMoE*>> moe_layers_;
  // Attention Residuals: the mix of the bank and the stream before the final norm
  AttnResMix output_res_;
  RMSNorm final_norm_;
};

}  // namespace k3::model
