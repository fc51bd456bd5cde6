// Pipeline stages and micro-batches in flight against the whole model run one micro-batch at a
// time: the same losses and the same gradient of every parameter, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/model_util.h"
#include "common/test_util.h"
#include "k3/model/model.h"

namespace k3::model::stage_test {
namespace {

ModelConfig config(const std::string& name) {
  return load_model_config(testing::source_dir() + "/configs/" + name);
}

// dense-tiny with 5 layers in Attention Residuals blocks of 2 (block starts at 0, 2, 4), or none.
ModelConfig dense(int64_t attn_res_block) {
  ModelConfig c = config("dense-tiny.json");
  c.num_hidden_layers = 5;
  c.attn_res_block_size = attn_res_block;
  return c;
}

struct Rig {
  Model model;
  ArenaRegions regions{size_t{32} << 20, 2};
  activation::ActivationManager acts;
  int64_t B = 2, T = 8;
  std::vector<int32_t> tokens[2], targets[2];

  explicit Rig(ModelConfig c) : model(std::move(c)) {
    model.initialize(3);
    testing::perturb_attn_res(model);
    for (int m = 0; m < 2; ++m) {
      tokens[m] = testing::random_tokens(static_cast<size_t>(B * T), 259, 10 + m);
      targets[m] = testing::random_tokens(static_cast<size_t>(B * T), 259, 20 + m);
    }
    targets[1][5] = -100;
  }
  TokenBatch batch(int m) { return {tokens[m].data(), targets[m].data(), B, T}; }
  MicroBatch micro_batch(int m) { return {m, regions[m], acts}; }
  std::vector<float> grads() const {
    const ParamRegistry& p = model.params();
    return {p.grads(), p.grads() + p.flat_size()};
  }
};

// Both micro-batches through forward_backward, one after the other: the reference.
std::vector<float> one_at_a_time(Rig& r, double losses[2]) {
  r.model.params().zero_grads();
  for (int m = 0; m < 2; ++m)
    losses[m] = r.model.forward_backward(r.regions[0], r.acts, r.batch(m), 0.5f).sum;
  return r.grads();
}

void expect_same_grads(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// Two forwards, then the backwards in either order; the first released micro-batch's region is
// reset (and overwritten) while the other is still waiting for its backward. In forward order the
// gradients are bit-identical; in the reverse order each gradient sums the same two parts the
// other way round (and the embedding's rows their tokens), which moves the last bits only.
TEST(MicroBatches, TwoInFlightMatchOneAtATime) {
  for (bool second_first : {false, true}) {
    Rig r(config("k3-nano.json"));
    double want_loss[2];
    const std::vector<float> want = one_at_a_time(r, want_loss);
    r.model.params().zero_grads();
    const Stage all = r.model.whole();
    for (int m = 0; m < 2; ++m)
      EXPECT_EQ(
          r.model.forward_stage(r.micro_batch(m), all, r.batch(m), 0.5f, nullptr, nullptr).sum,
          want_loss[m]);
    EXPECT_EQ(r.acts.in_flight(), 2u);
    for (int m : second_first ? std::vector{1, 0} : std::vector{0, 1}) {
      r.model.backward_stage(r.micro_batch(m), all, r.batch(m), nullptr, nullptr);
      r.regions[m].reset();
      // Whatever the released region held is gone: the other's backward must not read it.
      std::memset(r.regions[m].allocate(size_t{32} << 20), 0xff, size_t{32} << 20);
      r.regions[m].reset();
    }
    EXPECT_EQ(r.acts.count(), 0u);
    if (second_first)
      K3_EXPECT_CLOSE(r.grads(), want, 1e-7, 1e-5);
    else
      expect_same_grads(r.grads(), want);
  }
}

// Stages as [first, end) boundaries; the first holds the embedding, the last the head.
void check_stages(ModelConfig c, const std::vector<int64_t>& cuts) {
  Rig r(std::move(c));
  double want_loss[2];
  const std::vector<float> want = one_at_a_time(r, want_loss);
  Model& m = r.model;
  m.params().zero_grads();
  const int64_t n = r.B * r.T, S = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<Stage> stages;
  for (int64_t i = 0; i < S; ++i) stages.push_back({cuts[i], cuts[i + 1], i == 0, i == S - 1});
  // payload[i]: what enters stage i (unused for i = 0); grad[i] its gradient.
  std::vector<std::vector<float>> payload(static_cast<size_t>(S + 1)),
      grad(static_cast<size_t>(S + 1));
  for (int64_t i = 1; i < S; ++i) {
    payload[i].assign(static_cast<size_t>(m.payload_floats(cuts[i], n)), 0.f);
    grad[i] = payload[i];
  }
  // Micro-batch 0 and 1 alternate through the stages, both in flight, as in a pipeline.
  for (int mb = 0; mb < 2; ++mb) {
    double loss = 0;
    for (int64_t i = 0; i < S; ++i)
      loss += m.forward_stage({mb * 10 + static_cast<int>(i), r.regions[mb], r.acts}, stages[i],
                              r.batch(mb), 0.5f, payload[i].data(),
                              i + 1 < S ? payload[i + 1].data() : nullptr)
                  .sum;
    EXPECT_EQ(loss, want_loss[mb]) << "micro-batch " << mb;
  }
  for (int mb = 0; mb < 2; ++mb) {
    for (int64_t i = S - 1; i >= 0; --i)
      m.backward_stage({mb * 10 + static_cast<int>(i), r.regions[mb], r.acts}, stages[i],
                       r.batch(mb), i + 1 < S ? grad[i + 1].data() : nullptr, grad[i].data());
    r.regions[mb].reset();
  }
  EXPECT_EQ(r.acts.count(), 0u);
  expect_same_grads(r.grads(), want);
}

TEST(Stages, DenseStackSplitInTwoAndThree) {
  check_stages(dense(0), {0, 2, 5});
  check_stages(dense(0), {0, 1, 3, 5});
}

// Cuts inside a block (1, 3) and at block starts (2, 4): the bank travels with the stream.
TEST(Stages, AttentionResidualsSplitInTwoAndThree) {
  check_stages(dense(2), {0, 2, 5});
  check_stages(dense(2), {0, 1, 3, 5});
  check_stages(dense(2), {0, 3, 4, 5});
}

TEST(Stages, K3NanoSplitInTwoAndThree) {
  check_stages(config("k3-nano.json"), {0, 4, 8});
  check_stages(config("k3-nano.json"), {0, 2, 5, 8});
}

TEST(Stages, PayloadHoldsTheBankTakenSoFar) {
  const Model m(dense(2), false);
  const int64_t d = 64;
  EXPECT_EQ(m.payload_floats(0, 3), 3 * d);
  EXPECT_EQ(m.payload_floats(1, 3), 2 * 3 * d);  // the embedding's snapshot, then the stream
  EXPECT_EQ(m.payload_floats(2, 3), 2 * 3 * d);
  EXPECT_EQ(m.payload_floats(3, 3), 3 * 3 * d);
  EXPECT_EQ(Model(dense(0), false).payload_floats(3, 3), 3 * d);
}

TEST(Stages, RefusesStagesThatDoNotFit) {
  Rig r(dense(0));
  std::vector<float> out(static_cast<size_t>(r.model.payload_floats(2, r.B * r.T)));
  EXPECT_THROW(r.model.forward_stage(r.micro_batch(0), {1, 3, true, false}, r.batch(0), 1.f,
                                     nullptr, out.data()),
               Error);
  EXPECT_THROW(r.model.forward_stage(r.micro_batch(0), {0, 3, true, true}, r.batch(0), 1.f, nullptr,
                                     nullptr),
               Error);
  EXPECT_THROW(r.model.forward_stage(r.micro_batch(0), {3, 6, false, true}, r.batch(0), 1.f,
                                     out.data(), nullptr),
               Error);
}

}  // namespace
}  // namespace k3::model::stage_test
