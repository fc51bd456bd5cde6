#include "k3/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"

namespace k3::optim {

int64_t Schedule::decay_start() const {
  switch (kind) {
    case ScheduleKind::constant:
      return total_steps;
    case ScheduleKind::cosine:
      return warmup_steps;
    case ScheduleKind::wsd: {
      const auto decay =
          static_cast<int64_t>(std::llround(decay_fraction * static_cast<double>(total_steps)));
      return std::max(warmup_steps, total_steps - decay);
    }
  }
  return total_steps;
}

float Schedule::lr(int64_t step) const {
  const double t = static_cast<double>(step + 1), peak = peak_lr, floor = peak * min_lr_ratio;
  if (t <= static_cast<double>(warmup_steps))
    return static_cast<float>(peak * t / static_cast<double>(warmup_steps));
  const int64_t start = decay_start();
  if (step < start || start == total_steps) return peak_lr;
  const double p =
      std::min(1.0, (t - static_cast<double>(start)) / static_cast<double>(total_steps - start));
  if (kind == ScheduleKind::cosine)
    return static_cast<float>(floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * p)));
  switch (decay_shape) {
    case DecayShape::linear:
      return static_cast<float>(peak - (peak - floor) * p);
    case DecayShape::sqrt:
      return static_cast<float>(floor + (peak - floor) * (1.0 - std::sqrt(p)));
    case DecayShape::exp:
      return static_cast<float>(peak * std::pow(static_cast<double>(min_lr_ratio), p));
  }
  return peak_lr;
}

void Schedule::validate() const {
  auto field = [](const char* name) { return ErrorContext{"", name, -1}; };
  K3_CHECK_CTX(peak_lr > 0 && std::isfinite(peak_lr), field("lr"),
               "expected a positive learning rate, got ", peak_lr);
  K3_CHECK_CTX(total_steps >= 1, field("steps"), "expected at least 1 step, got ", total_steps);
  K3_CHECK_CTX(warmup_steps >= 0 && warmup_steps <= total_steps, field("warmup"), "expected 0 to ",
               total_steps, " warmup steps, got ", warmup_steps);
  K3_CHECK_CTX(min_lr_ratio >= 0 && min_lr_ratio <= 1, field("min_lr_ratio"),
               "expected a value in [0, 1], got ", min_lr_ratio);
  if (kind != ScheduleKind::wsd) return;
  K3_CHECK_CTX(decay_fraction > 0 && decay_fraction <= 1, field("decay_fraction"),
               "expected a value in (0, 1], got ", decay_fraction);
  K3_CHECK_CTX(decay_shape != DecayShape::exp || min_lr_ratio > 0, field("min_lr_ratio"),
               "an exponential decay needs a floor above 0");
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::wsd})
    if (name == schedule_kind_name(k)) return k;
  throw Error("unknown schedule \"" + name + "\": expected cosine, wsd or constant");
}

DecayShape parse_decay_shape(const std::string& name) {
  for (DecayShape s : {DecayShape::linear, DecayShape::sqrt, DecayShape::exp})
    if (name == decay_shape_name(s)) return s;
  throw Error("unknown decay shape \"" + name + "\": expected linear, sqrt or exp");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::cosine:
      return "cosine";
    case ScheduleKind::wsd:
      return "wsd";
  }
  return "?";
}

const char* decay_shape_name(DecayShape shape) {
  switch (shape) {
    case DecayShape::linear:
      return "linear";
    case DecayShape::sqrt:
      return "sqrt";
    case DecayShape::exp:
      return "exp";
  }
  return "?";
}

int64_t warmup_steps_from(double warmup, int64_t total_steps) {
  K3_CHECK_CTX(warmup >= 0 && std::isfinite(warmup), (ErrorContext{"", "warmup", -1}),
               "expected a fraction below 1 or a step count, got ", warmup);
  const double steps = warmup < 1 ? warmup * static_cast<double>(total_steps) : warmup;
  return std::min<int64_t>(std::llround(steps), total_steps);
}

}  // namespace k3::optim
