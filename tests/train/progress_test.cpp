#include "k3/train/observe/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace k3::train {
namespace {

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(83), "1m23s");
  EXPECT_EQ(format_duration(3600), "1h00m");
  EXPECT_EQ(format_duration(2 * 3600 + 5 * 60 + 10), "2h05m");
  EXPECT_EQ(format_duration(90061), "1d01h");
  EXPECT_EQ(format_duration(NAN), "?");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(INFINITY), "?");
}

TEST(Progress, FullLine) {
  ProgressState s;
  s.step = 120;
  s.total_steps = 1000;
  s.loss = 2.3454;
  s.loss_floor = 1.234;
  s.lr = 2.9e-3;
  s.tokens_per_second = 1234.4;
  s.eta_seconds = 83;
  EXPECT_EQ(progress_line(s, 10),
            "step  120/1000 [#.........] loss 2.345 (floor 1.234, +1.111) lr 2.9e-3 1234 tok/s "
            "ETA 1m23s");
}

TEST(Progress, UnknownPartsAreLeftOut) {
  ProgressState s;
  s.step = 7;
  s.total_steps = 7;
  EXPECT_EQ(progress_line(s, 4), "step 7/7 [####]");
  s.loss = 3;
  s.lr = 9.96e-4;
  s.tokens_per_second = 56789;
  EXPECT_EQ(progress_line(s, 0), "step 7/7 loss 3.000 lr 1.0e-3 56.8k tok/s");
}

// Not a terminal: ordinary lines, the first, then every 10 steps, and the last.
TEST(Progress, PlainLinesAtACadence) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  {
    ProgressDisplay display(out, 10, 1e9);
    for (int64_t step = 1; step <= 35; ++step) {
      ProgressState s;
      s.step = step;
      s.total_steps = 35;
      s.loss = 1;
      display.update(s);
    }
    display.message("eval loss 0.9");
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.substr(0, 8), "step  1/");
  EXPECT_NE(text.find("\nstep 11/35"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstep 35/35"), std::string::npos) << text;
  EXPECT_NE(text.find("\neval loss 0.9\n"), std::string::npos) << text;
}

// On a terminal: one line redrawn with \r, a message on its own line, a newline at the end.
TEST(Progress, RedrawsInPlaceOnATerminal) {
  int terminal = -1, device = -1;
  ASSERT_EQ(::openpty(&terminal, &device, nullptr, nullptr, nullptr), 0);
  std::FILE* out = ::fdopen(device, "w");
  {
    ProgressDisplay display(out);
    for (int64_t step = 1; step <= 3; ++step) {
      ProgressState s;
      s.step = step;
      s.total_steps = 3;
      display.update(s);
      if (step == 2) display.message("eval");
    }
  }
  std::fclose(out);
  std::string text;
  char buf[4096];
  ::fcntl(terminal, F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = ::read(terminal, buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(terminal);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_NE(text.find("\rstep 1/3"), std::string::npos) << text;
  EXPECT_NE(text.find("eval\r\n\rstep 2/3"), std::string::npos) << text;
  EXPECT_NE(text.find("\rstep 3/3 [####################] ETA 0s\033[K\r\n"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace k3::train
