// The activation manager keeps each micro-batch's tensors apart and releases them one at a time;
// its policies hold a segment's tensors as the rules say and give them back before the backward.
#include "k3/activation/manager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "k3/base/error.h"
#include "k3/tensor/bf16.h"
#include "k3/tensor/fp8_e4m3.h"

namespace k3::activation {
namespace {

TEST(ActivationManager, MicroBatchesSaveUnderTheSameNamesApart) {
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  ActivationManager m;
  m.save(0, "layer.x", a, 2);
  m.save(7, "layer.x", b, 3);
  EXPECT_EQ(m.load(0, "layer.x").f32(), a);  // outside segments: referenced
  EXPECT_EQ(m.load(7, "layer.x").f32(), b);
  EXPECT_EQ(m.count(), 2u);
  EXPECT_EQ(m.in_flight(), 2u);
  EXPECT_THROW(m.save(7, "layer.x", a, 2), Error);  // twice in one micro-batch
  EXPECT_THROW(m.load(3, "layer.x"), Error);        // a micro-batch never seen

  m.release(0);  // micro-batch 7 is still in flight
  EXPECT_FALSE(m.contains(0, "layer.x"));
  EXPECT_THROW(m.load(0, "layer.x"), Error);
  EXPECT_EQ(m.load(7, "layer.x").f32(), b);
  EXPECT_EQ(m.in_flight(), 1u);
  m.save(0, "layer.x", a, 2);  // the id is free again
  m.clear();
  EXPECT_EQ(m.count(), 0u);
  EXPECT_FALSE(m.contains(7, "layer.x"));
}

TEST(PolicyRules, FirstMatchWinsAndBadRulesNameTheField) {
  const PolicyRules r(Policy::Fp8, PolicyRules::parse(" mla.*.self_attn.*=recompute,"
                                                      "*.3.mlp.*=offload, *=keep",
                                                      "activation.rules"));
  EXPECT_EQ(r.policy_of("mla.3.self_attn.q"), Policy::Recompute);
  EXPECT_EQ(r.policy_of("kda.3.mlp.gate"), Policy::Offload);
  EXPECT_EQ(r.policy_of("kda.4.mlp.gate"), Policy::Keep);
  EXPECT_EQ(PolicyRules(Policy::Fp8, {}).policy_of("kda.4.mlp.gate"), Policy::Fp8);
  for (const char* bad : {"*.mlp.*", "=keep", "*.mlp.*=fp4"}) {
    try {
      PolicyRules::parse(bad, "activation.rules");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("activation.rules"), std::string::npos) << e.what();
    }
  }
}

// A toy layer: y = 2x, saving x (allocated in the segment) and a stream tensor allocated before
// it. The "backward" reads both back.
struct Toy {
  Arena arena{size_t{1} << 20};
  ActivationManager acts;
  std::vector<float> input = std::vector<float>(300);
  float* stream = nullptr;
  int forwards = 0;

  Toy() {
    for (size_t i = 0; i < input.size(); ++i) input[i] = 0.01f * static_cast<float>(i) - 1.3f;
  }
  void forward(int mb, int64_t id) {
    SegmentScope seg(acts, arena, mb, {id, "kda", id, "model.layers." + std::to_string(id) + "."},
                     true);
    float* x = arena.allocate_array<float>(input.size());
    std::memcpy(x, input.data(), input.size() * sizeof(float));
    acts.save(mb, "model.layers." + std::to_string(id) + ".mlp.x", x, 300);
    acts.save(mb, "model.layers." + std::to_string(id) + ".mlp.ids", x, 7, /*exact=*/true);
    acts.save(mb, "model.layers." + std::to_string(id) + ".P_in", stream, 4);
    ++forwards;
  }
  void run(int64_t segments) {
    stream = arena.allocate_array<float>(4);
    for (int i = 0; i < 4; ++i) stream[i] = static_cast<float>(i);
    for (int64_t id = 0; id < segments; ++id) forward(0, id);
  }
};

TEST(ActivationManager, PoliciesHoldASegmentsTensorsAndBringThemBack) {
  for (Policy p : kPolicies) {
    Toy t;
    t.acts.configure(PolicyRules(p, {}));
    t.run(3);
    // Only the stream outlives the segments; under keep each segment stays where it ran, uncopied.
    // (x: 300 floats in each of 3 segments, each at the arena's 64-byte alignment)
    EXPECT_EQ(t.arena.used(), p == Policy::Keep ? 64 + 2 * 1216 + 1200u : 16u) << policy_name(p);
    if (p != Policy::Keep) {  // a kept tensor is there all along
      EXPECT_THROW(t.acts.load(0, "model.layers.2.mlp.x"), Error) << policy_name(p);
    }
    for (int64_t id = 2; id >= 0; --id) {
      const std::string prefix = "model.layers." + std::to_string(id);
      t.acts.restore(0, id, [&] { t.forward(0, id); });
      const float* x = t.acts.load(0, prefix + ".mlp.x").f32();
      const float* ids = t.acts.load(0, prefix + ".mlp.ids").f32();
      EXPECT_EQ(t.acts.load(0, prefix + ".P_in").f32(), t.stream);  // referenced, never copied
      for (int i = 0; i < 7; ++i) EXPECT_EQ(ids[i], t.input[static_cast<size_t>(i)]);  // exact
      for (size_t i = 0; i < 300; ++i) {
        const float want = t.input[i];
        if (p == Policy::Fp8)
          EXPECT_NEAR(x[i], want, std::fabs(want) / 16 + 1.3f / 448 / 8) << i;
        else if (p == Policy::Bf16)
          EXPECT_EQ(x[i], bf16_to_float(float_to_bf16(want))) << i;
        else
          EXPECT_EQ(x[i], want) << policy_name(p) << " " << i;
      }
      t.acts.finish(0, id);
      EXPECT_FALSE(t.acts.contains(0, prefix + ".mlp.x"));
    }
    EXPECT_EQ(t.forwards, p == Policy::Recompute ? 6 : 3) << policy_name(p);
    EXPECT_EQ(t.acts.stored_bytes(), 0u) << policy_name(p);
    const ManagerStats& s = t.acts.stats();
    const size_t f32 = 300 * sizeof(float);
    EXPECT_EQ(s.classes.at("kda.mlp.x").bytes[static_cast<size_t>(p)], 3 * f32);
    // ids are exact: under fp8 and bf16 they are kept
    EXPECT_EQ(s.classes.at("kda.mlp.ids").bytes[static_cast<size_t>(
                  lossy(p) ? Policy::Keep : p)],
              3 * 7 * sizeof(float));
    // The pool: keep holds nothing (the arena does); fp8 and bf16 the codes of 3 segments; offload and
    // recompute only the segment being restored.
    if (p == Policy::Offload) {
      EXPECT_GT(s.offloaded_peak, 0u);
    }
    EXPECT_EQ(s.stored_peak > 0u, p != Policy::Keep) << policy_name(p);
    if (p == Policy::Keep) {
      EXPECT_EQ(s.keep_seconds, 0.0);  // nothing copied
    }
  }
}

// A segment whose tensors are all kept is held in the arena and loads return the memory saved; a
// segment with another policy beside keep copies its kept tensors into the pool and is rewound.
TEST(ActivationManager, AllKeptSegmentsStayInTheArenaOthersAreCopiedOut) {
  Toy t;
  t.acts.configure(PolicyRules(Policy::Keep, PolicyRules::parse("kda.1.mlp.ids=recompute", "r")));
  t.stream = t.arena.allocate_array<float>(4);
  const size_t before = t.arena.used();
  t.forward(0, 0);
  const size_t held = t.arena.used() - before;
  EXPECT_GT(held, 300 * sizeof(float));
  const float* x0 = t.acts.load(0, "model.layers.0.mlp.x").f32();
  EXPECT_EQ(t.arena.offset_of(x0), static_cast<int64_t>(Arena::kAlign));  // in place
  EXPECT_EQ(t.acts.stored_bytes(), 0u);
  t.forward(0, 1);
  EXPECT_EQ(t.arena.used(), before + held);  // rewound: its x was copied out
  EXPECT_EQ(t.arena.offset_of(t.acts.load(0, "model.layers.1.mlp.x").f32()), -1);
  EXPECT_EQ(t.acts.stored_bytes(), BufferPool::pool_bytes(300 * sizeof(float)));
  EXPECT_EQ(t.acts.profile()[0].arena_bytes, held);
  for (int64_t id = 1; id >= 0; --id) {
    t.acts.restore(0, id, [&] { t.forward(0, id); });
    const float* x = t.acts.load(0, "model.layers." + std::to_string(id) + ".mlp.x").f32();
    EXPECT_EQ(std::memcmp(x, t.input.data(), 300 * sizeof(float)), 0) << id;
    t.acts.finish(0, id);
  }
  EXPECT_EQ(t.acts.stored_bytes(), 0u);
}

// fp8 stores a byte and a scale per 128 values, bf16 two bytes a value.
TEST(ActivationManager, LossyPoliciesStoreTheirCodesOnly) {
  const int64_t n = 1 << 18;
  for (const auto& [policy, bytes] : {std::pair{Policy::Fp8, fp8_block_bytes(n)},
                                      {Policy::Bf16, static_cast<size_t>(n) * 2}}) {
    Arena arena{size_t{8} << 20};
    ActivationManager acts;
    acts.configure(PolicyRules(policy, {}));
    {
      SegmentScope seg(acts, arena, 0, {0, "kda", 0, "model.layers.0."}, true);
      float* x = arena.allocate_array<float>(n);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000) * 1e-3f;
      acts.save(0, "model.layers.0.mlp.h", x, n);
    }
    EXPECT_EQ(acts.stored_bytes(), BufferPool::pool_bytes(bytes)) << policy_name(policy);
  }
  EXPECT_LT(fp8_block_bytes(n), static_cast<size_t>(n) * sizeof(float) * 27 / 100);
}

TEST(ActivationManager, MisuseIsAnErrorNamingTheTensor) {
  Toy t;
  t.acts.configure(PolicyRules(Policy::Recompute, {}));
  t.run(1);
  // A re-run that does not save what the forward saved
  try {
    t.acts.restore(0, 0, [] {});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.x"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.acts.restore(0, 5, [] {}), Error);  // no such segment
  EXPECT_THROW(t.acts.finish(0, 5), Error);
}

}  // namespace
}  // namespace k3::activation
