#include "k3/optim/schedule.h"

#include "common/test_util.h"
#include "k3/base/error.h"

namespace k3::optim {
namespace {

// Golden values at each boundary: peak 1, 100 steps, 10 warmup steps, floor 0.1.
Schedule make(ScheduleKind kind, DecayShape shape = DecayShape::linear) {
  return {.kind = kind,
          .peak_lr = 1.0f,
          .total_steps = 100,
          .warmup_steps = 10,
          .min_lr_ratio = 0.1f,
          .decay_fraction = 0.2,
          .decay_shape = shape};
}

TEST(Schedule, WarmupIsLinearAndEndsAtThePeak) {
  for (ScheduleKind k : {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::wsd}) {
    const Schedule s = make(k);
    EXPECT_FLOAT_EQ(s.lr(0), 0.1f);
    EXPECT_FLOAT_EQ(s.lr(4), 0.5f);
    EXPECT_FLOAT_EQ(s.lr(9), 1.0f);  // warmup end
  }
}

TEST(Schedule, CosineDecaysFromTheWarmupEndToTheFloor) {
  const Schedule s = make(ScheduleKind::cosine);
  EXPECT_EQ(s.decay_start(), 10);
  EXPECT_FLOAT_EQ(s.lr(10), static_cast<float>(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 90))));
  EXPECT_FLOAT_EQ(s.lr(54), 0.55f);  // halfway: t = 55, p = 1/2
  EXPECT_FLOAT_EQ(s.lr(99), 0.1f);   // final step: the floor
  EXPECT_FLOAT_EQ(s.lr(500), 0.1f);  // past the end
}

TEST(Schedule, WsdHoldsThePeakThenDecaysOverTheLastFraction) {
  struct Golden {
    DecayShape shape;
    float first, half;  // the first decaying step (p = 1/20) and halfway (p = 1/2)
  };
  for (const Golden& g :
       {Golden{DecayShape::linear, 0.955f, 0.55f},
        Golden{DecayShape::sqrt, static_cast<float>(0.1 + 0.9 * (1 - std::sqrt(0.05))),
               static_cast<float>(0.1 + 0.9 * (1 - std::sqrt(0.5)))},
        Golden{DecayShape::exp, static_cast<float>(std::pow(0.1, 0.05)),
               static_cast<float>(std::sqrt(0.1))}}) {
    const Schedule s = make(ScheduleKind::wsd, g.shape);
    EXPECT_EQ(s.decay_start(), 80);
    EXPECT_FLOAT_EQ(s.lr(10), 1.0f);
    EXPECT_FLOAT_EQ(s.lr(79), 1.0f);  // the last stable step
    EXPECT_FLOAT_EQ(s.lr(80), g.first) << decay_shape_name(g.shape);
    EXPECT_FLOAT_EQ(s.lr(89), g.half) << decay_shape_name(g.shape);
    EXPECT_FLOAT_EQ(s.lr(99), 0.1f) << decay_shape_name(g.shape);
    EXPECT_FLOAT_EQ(s.lr(120), 0.1f);
  }
}

TEST(Schedule, ConstantHoldsThePeak) {
  const Schedule s = make(ScheduleKind::constant);
  EXPECT_EQ(s.decay_start(), 100);
  EXPECT_FLOAT_EQ(s.lr(10), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(99), 1.0f);
}

// A decay longer than what follows warmup starts right after warmup.
TEST(Schedule, WsdDecayNeverOverlapsWarmup) {
  Schedule s = make(ScheduleKind::wsd);
  s.decay_fraction = 0.95;
  EXPECT_EQ(s.decay_start(), 10);
  EXPECT_FLOAT_EQ(s.lr(9), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(99), 0.1f);
}

TEST(Schedule, WarmupFromFractionOrSteps) {
  EXPECT_EQ(warmup_steps_from(0.01, 1000), 10);
  EXPECT_EQ(warmup_steps_from(25, 1000), 25);
  EXPECT_EQ(warmup_steps_from(5000, 1000), 1000);
  EXPECT_THROW(warmup_steps_from(-1, 10), Error);
}

TEST(Schedule, ValidationNamesTheField) {
  auto message = [](Schedule s) { return testing::error_of([&] { s.validate(); }); };
  EXPECT_EQ(message(make(ScheduleKind::wsd)), "");
  Schedule s = make(ScheduleKind::wsd, DecayShape::exp);
  s.min_lr_ratio = 0;
  EXPECT_NE(message(s).find("min_lr_ratio"), std::string::npos);
  s = make(ScheduleKind::wsd);
  s.decay_fraction = 0;
  EXPECT_NE(message(s).find("decay_fraction"), std::string::npos);
  s = make(ScheduleKind::cosine);
  s.warmup_steps = 101;
  EXPECT_NE(message(s).find("warmup"), std::string::npos);
}

TEST(Schedule, NamesRoundTrip) {
  for (ScheduleKind k : {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::wsd})
    EXPECT_EQ(parse_schedule_kind(schedule_kind_name(k)), k);
  for (DecayShape d : {DecayShape::linear, DecayShape::sqrt, DecayShape::exp})
    EXPECT_EQ(parse_decay_shape(decay_shape_name(d)), d);
  EXPECT_THROW(parse_schedule_kind("step"), Error);
  EXPECT_THROW(parse_decay_shape("cubic"), Error);
}

}  // namespace
}  // namespace k3::optim
