// A live progress line for training:
//   step  120/1000 [##..................] loss 2.345 (floor 1.234, +1.111) lr 2.9e-3 1234 tok/s ETA
//   1m23s
// On a terminal the line is redrawn in place; otherwise (a log file, a pipe) it is printed as
// ordinary lines at a steady cadence.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "k3/base/timer.h"

namespace k3::train {

// What the progress line shows; NaN parts are left out.
struct ProgressState {
  int64_t step = 0;  // steps completed
  int64_t total_steps = 0;
  double loss = NAN;
  double loss_floor = NAN;  // the lowest reachable loss when known (e.g. the data's entropy)
  double lr = NAN;
  double tokens_per_second = NAN;
  double eta_seconds = NAN;
};

// "0s", "59s", "1m23s", "2h05m", "3d04h"; "?" when unknown (NaN, infinite or negative).
std::string format_duration(double seconds);

// The progress line for STATE, without a line ending.
std::string progress_line(const ProgressState& state, int bar_width = 20);

class ProgressDisplay {
 public:
  // Writes to OUT. When OUT is not a terminal, a line is printed for the first update, then
  // every PLAIN_EVERY_STEPS steps or PLAIN_EVERY_SECONDS seconds, whichever comes first, and at
  // the last step.
  explicit ProgressDisplay(std::FILE* out = stdout, int64_t plain_every_steps = 10,
                           double plain_every_seconds = 30);
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  // Shows STATE. A NaN eta_seconds is estimated from the pace since the first update.
  void update(ProgressState state);
  // Prints TEXT on a line of its own (an evaluation result, a sample) without breaking the
  // live line, which is redrawn below it.
  void message(const std::string& text);
  // Ends the live line, so later output starts on a fresh line.
  void finish();

 private:
  void draw(const std::string& line);

  std::FILE* out_;
  bool live_;  // OUT is a terminal
  int64_t plain_every_steps_;
  double plain_every_seconds_;
  Timer since_start_, since_print_;
  int64_t first_step_ = -1, last_printed_step_ = -1;
  std::string live_line_;  // what the terminal currently shows
};

}  // namespace k3::train
