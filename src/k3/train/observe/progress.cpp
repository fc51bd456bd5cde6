#include "k3/train/observe/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

#include "k3/base/format.h"

namespace k3::train {
namespace {

// 2.9e-3 rather than 2.9e-03: learning rates are read at a glance.
std::string format_lr(double lr) {
  if (lr == 0) return "0";
  int exponent = static_cast<int>(std::floor(std::log10(std::abs(lr))));
  double mantissa = lr / std::pow(10.0, exponent);
  if (std::abs(mantissa) >= 9.95) mantissa /= 10, exponent += 1;  // 9.96e-4 prints as 1.0e-3
  return strprintf("%.1fe%d", mantissa, exponent);
}

std::string format_rate(double tokens_per_second) {
  if (tokens_per_second >= 1e6) return strprintf("%.2fM", tokens_per_second / 1e6);
  if (tokens_per_second >= 1e4) return strprintf("%.1fk", tokens_per_second / 1e3);
  return strprintf("%.0f", tokens_per_second);
}

int terminal_columns(std::FILE* out) {
  winsize size{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0 && seconds < 1e12)) return "?";  // NaN, negative, or beyond any run
  const long long s = std::llround(seconds);
  if (s < 60) return strprintf("%llds", s);
  if (s < 3600) return strprintf("%lldm%02llds", s / 60, s % 60);
  if (s < 86400) return strprintf("%lldh%02lldm", s / 3600, s % 3600 / 60);
  return strprintf("%lldd%02lldh", s / 86400, s % 86400 / 3600);
}

std::string progress_line(const ProgressState& st, int bar_width) {
  const std::string total = std::to_string(st.total_steps);
  std::string line = strprintf("step %*lld/%s", static_cast<int>(total.size()),
                               static_cast<long long>(st.step), total.c_str());
  if (st.total_steps > 0 && bar_width > 0) {
    const int64_t filled = std::clamp<int64_t>(st.step * bar_width / st.total_steps, 0, bar_width);
    line += " [" + std::string(filled, '#') + std::string(bar_width - filled, '.') + "]";
  }
  if (!std::isnan(st.loss)) {
    line += strprintf(" loss %.3f", st.loss);
    if (!std::isnan(st.loss_floor))
      line += strprintf(" (floor %.3f, %+.3f)", st.loss_floor, st.loss - st.loss_floor);
  }
  if (!std::isnan(st.lr)) line.append(" lr ").append(format_lr(st.lr));
  if (!std::isnan(st.tokens_per_second))
    line.append(" ").append(format_rate(st.tokens_per_second)).append(" tok/s");
  if (!std::isnan(st.eta_seconds)) line.append(" ETA ").append(format_duration(st.eta_seconds));
  return line;
}

ProgressDisplay::ProgressDisplay(std::FILE* out, int64_t plain_every_steps,
                                 double plain_every_seconds)
    : out_(out),
      live_(::isatty(::fileno(out)) != 0),
      plain_every_steps_(plain_every_steps),
      plain_every_seconds_(plain_every_seconds) {}

ProgressDisplay::~ProgressDisplay() { finish(); }

void ProgressDisplay::update(ProgressState state) {
  if (first_step_ < 0) {
    first_step_ = state.step;
    since_start_.reset();
  }
  if (std::isnan(state.eta_seconds) && state.step > first_step_)
    state.eta_seconds = since_start_.seconds() / static_cast<double>(state.step - first_step_) *
                        static_cast<double>(state.total_steps - state.step);
  const std::string line = progress_line(state);
  if (live_) {
    draw(line);
    return;
  }
  const bool due = last_printed_step_ < 0 || state.step >= state.total_steps ||
                   state.step - last_printed_step_ >= plain_every_steps_ ||
                   since_print_.seconds() >= plain_every_seconds_;
  if (!due) return;
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  last_printed_step_ = state.step;
  since_print_.reset();
}

void ProgressDisplay::draw(const std::string& line) {
  live_line_ = line;
  const int columns = terminal_columns(out_);
  // A line wider than the terminal would wrap, and \r would then only redraw its last row.
  const std::string shown = columns > 1 && line.size() >= static_cast<size_t>(columns)
                                ? line.substr(0, columns - 1)
                                : line;
  std::fprintf(out_, "\r%s\033[K", shown.c_str());
  std::fflush(out_);
}

void ProgressDisplay::message(const std::string& text) {
  if (live_ && !live_line_.empty()) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "%s\n", text.c_str());
  if (live_ && !live_line_.empty()) draw(live_line_);
  std::fflush(out_);
}

void ProgressDisplay::finish() {
  if (live_ && !live_line_.empty()) std::fprintf(out_, "\n");
  live_line_.clear();
  std::fflush(out_);
}

}  // namespace k3::train
