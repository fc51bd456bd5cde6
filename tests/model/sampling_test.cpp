#include "k3/model/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/base/arena.h"
#include "k3/model/model.h"

namespace k3::model {
namespace {

using testing::error_of;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The error sample_token raises for P on ordinary logits, or "" when it picks a token.
std::string sampling_error(const SamplingParams& p) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  return error_of([&] { sample_token(logits, p, 0.5f); });
}

TEST(SampleToken, RefusesParametersOutOfRangeNamingThem) {
  EXPECT_EQ(sampling_error({}), "");
  EXPECT_EQ(sampling_error({.temperature = 0}), "");
  EXPECT_EQ(sampling_error({.temperature = 1e300, .top_k = 1000, .top_p = 1}), "");
  for (double t : {kNaN, kInf, -kInf, -0.5})
    EXPECT_TRUE(contains(sampling_error({.temperature = t}),
                         "field temperature: expected a finite value >= 0"))
        << t;
  EXPECT_TRUE(contains(sampling_error({.top_k = -1}),
                       "field top_k: expected a value >= 0 (0: no top-k filter), got -1"))
      << sampling_error({.top_k = -1});
  for (double top_p : {kNaN, kInf, 0.0, -0.1, 1.5})
    EXPECT_TRUE(
        contains(sampling_error({.top_p = top_p}), "field top_p: expected a value in (0, 1]"))
        << top_p;
}

TEST(SampleToken, RefusesNonFiniteLogitsAndDrawsOutsideTheUnitInterval) {
  const std::vector<float> logits = {0.5f, static_cast<float>(kNaN), 1.0f};
  EXPECT_TRUE(contains(error_of([&] { sample_token(logits, {}, 0.5f); }), "found nan at token 1"));
  EXPECT_TRUE(
      contains(error_of([&] { sample_token(logits, {.temperature = 0}, 0.5f); }), "at token 1"));
  const std::vector<float> fine = {0.5f, 1.0f};
  for (float u : {-0.1f, 1.5f, static_cast<float>(kNaN)})
    EXPECT_TRUE(contains(error_of([&] { sample_token(fine, {}, u); }), "field u")) << u;
}

// The draw picks along the kept candidates in descending order; top-k and top-p cut the tail.
TEST(SampleToken, FiltersAndDrawsAsDocumented) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  EXPECT_EQ(sample_token(logits, {.temperature = 0}, 0.99f), 1);
  EXPECT_EQ(sample_token(logits, {.top_k = 1}, 0.99f), 1);
  EXPECT_EQ(sample_token(logits, {.top_k = 2}, 0.99f), 3);
  EXPECT_EQ(sample_token(logits, {}, 0.0f), 1);
  EXPECT_EQ(sample_token(logits, {}, 0.999f), 2);
  EXPECT_EQ(sample_token(logits, {.top_p = 0.1}, 0.999f), 1);
}

TEST(PromptRoom, MaxTokensMustLeaveRoomForAPrompt) {
  EXPECT_EQ(prompt_room(6, 16), 10);
  EXPECT_EQ(prompt_room(15, 16), 1);
  for (int64_t max_new : {int64_t{0}, int64_t{-3}, int64_t{16}, int64_t{1} << 60}) {
    const std::string e = error_of([&] { prompt_room(max_new, 16); });
    EXPECT_TRUE(contains(e, "field max_tokens: expected from 1 to 15 new tokens")) << e;
    EXPECT_TRUE(contains(e, "got " + std::to_string(max_new))) << e;
  }
  EXPECT_EQ(error_of([] { check_prompt_fits(10, 6, 16); }), "");
  EXPECT_EQ(error_of([] { check_prompt_fits(11, 6, 16); }),
            "field prompt: a prompt of 11 tokens plus max_tokens 6 exceeds the model's context of "
            "16 tokens "
            "(max_position_embeddings): at most 10 prompt tokens fit");
}

// A tiny model with a context of 16 positions.
struct SmallContext {
  Model model;
  Arena arena{size_t{64} << 20, false};
  SmallContext() : model(config()) { model.initialize(3); }
  static ModelConfig config() {
    ModelConfig c = load_model_config(testing::source_dir() + "/configs/dense-tiny.json");
    c.max_position_embeddings = 16;
    return c;
  }
};

TEST(Generate, FillsTheContextExactlyAndRefusesBeyondIt) {
  SmallContext f;
  const std::vector<int32_t> ten(10, 65), eleven(11, 65), long_prompt(160, 65);
  EXPECT_EQ(generate(f.model, f.arena, ten, 6, {.seed = 1}).size(), 6u);
  EXPECT_TRUE(contains(error_of([&] { generate(f.model, f.arena, eleven, 6, {}); }),
                       "a prompt of 11 tokens"));
  const std::string e = error_of([&] { generate(f.model, f.arena, long_prompt, 1, {}); });
  EXPECT_TRUE(contains(e, "field prompt: a prompt of 160 tokens")) << e;
  EXPECT_TRUE(contains(e, "context of 16 tokens")) << e;
  EXPECT_TRUE(
      contains(error_of([&] { generate(f.model, f.arena, ten, 0, {}); }), "field max_tokens"));
  EXPECT_TRUE(contains(error_of([&] { generate(f.model, f.arena, ten, int64_t{1} << 50, {}); }),
                       "field max_tokens"));
  EXPECT_TRUE(contains(error_of([&] { generate(f.model, f.arena, ten, 3, {.temperature = kNaN}); }),
                       "field temperature"));
  EXPECT_TRUE(
      contains(error_of([&] { generate(f.model, f.arena, ten, 3, {.top_p = 0}); }), "field top_p"));
}

}  // namespace
}  // namespace k3::model
