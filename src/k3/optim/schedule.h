// Learning-rate schedules (math §8): linear warmup, then constant, cosine to a floor, or WSD
// (warmup-stable-decay: hold the peak, decay over the last fraction of the run).
//
// Step s (0-based) uses the rate at the end of the step, t = s + 1 in [1, total]:
//   warmup  t <= W: peak·t/W, so step W − 1 is the first at the peak
//   decay   over (D, total], progress p = (t − D)/(total − D), D = W for cosine and
//           D = max(W, total − round(decay_fraction·total)) for WSD:
//     cosine        floor + (peak − floor)·(1 + cos πp)/2
//     wsd linear    peak − (peak − floor)·p
//     wsd sqrt      floor + (peak − floor)·(1 − √p)      (the "1 − sqrt" shape)
//     wsd exp       peak·(floor/peak)^p                   (needs a floor above 0)
// with floor = min_lr_ratio·peak. The last step, s = total − 1, is at the floor; later steps stay
// there. Constant holds the peak after warmup.
#pragma once

#include <cstdint>
#include <string>

namespace k3::optim {

enum class ScheduleKind { constant, cosine, wsd };
enum class DecayShape { linear, sqrt, exp };

struct Schedule {
  ScheduleKind kind = ScheduleKind::cosine;
  float peak_lr = 1e-3f;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;
  float min_lr_ratio = 0.1f;                    // the floor, as a fraction of the peak
  double decay_fraction = 0.2;                  // wsd: share of the steps spent decaying
  DecayShape decay_shape = DecayShape::linear;  // wsd

  float lr(int64_t step) const;
  // The first step below the peak after warmup (total_steps when the rate never decays).
  int64_t decay_start() const;
  // Throws naming the field at fault.
  void validate() const;
};

ScheduleKind parse_schedule_kind(const std::string& name);  // cosine, wsd, constant
DecayShape parse_decay_shape(const std::string& name);      // linear, sqrt, exp
const char* schedule_kind_name(ScheduleKind kind);
const char* decay_shape_name(DecayShape shape);

// Warmup length in steps: WARMUP is a fraction of TOTAL_STEPS when below 1, else a step count.
int64_t warmup_steps_from(double warmup, int64_t total_steps);

}  // namespace k3::optim
