#include "k3/base/stop_signals.h"

#include <csignal>
#include <cstring>

#include "k3/base/error.h"

namespace k3 {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};
volatile std::sig_atomic_t g_requested = 0;
bool g_installed = false;
struct sigaction g_previous[3];

void on_stop_signal(int sig) {
  if (g_requested != 0) {  // the second request: stop now, as if never handled
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_requested = sig;
}

}  // namespace

StopSignals::StopSignals() {
  K3_CHECK(!g_installed, "stop-signal handlers are already installed");
  g_installed = true;
  g_requested = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &sa, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

int StopSignals::requested() const { return g_requested; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace k3
