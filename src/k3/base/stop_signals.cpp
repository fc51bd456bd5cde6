#include "k3/base/stop_signals.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "k3/base/error.h"

namespace k3 {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};
std::atomic<int> g_requested{0};
std::atomic<bool> g_listening{false};
bool g_ignored[3] = {};  // ignored when routed (e.g. SIGINT in a shell's background job)
std::mutex g_note_mutex;
std::function<void()> g_note;  // the StopNote's, if one is alive

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  return set;
}

int index_of(int sig) {
  for (int i = 0; i < 3; ++i)
    if (kStopSignals[i] == sig) return i;
  return -1;
}

// One stop signal, from the watcher (or, in a thread started before the signals were routed, from
// the handler; everything here is async-signal-safe): the first is recorded while someone
// listens (returns true), any other takes the signal's default action now.
bool take(int sig) {
  if (g_listening.load() && g_requested.load() == 0) {
    g_requested.store(sig);
    return true;
  }
  if (!g_listening.load() && g_ignored[index_of(sig)]) return false;
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  std::raise(sig);
  return false;
}

void watch() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || !take(sig)) continue;
    const std::lock_guard<std::mutex> hold(g_note_mutex);
    if (g_note) g_note();
  }
}

}  // namespace

void route_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A handler, not SIG_IGN, so that blocked signals stay pending for sigwait.
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = [](int sig) { take(sig); };
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) {
      struct sigaction before;
      sigaction(kStopSignals[i], &sa, &before);
      g_ignored[i] = before.sa_handler == SIG_IGN;
    }
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(watch).detach();
  });
}

StopSignals::StopSignals() {
  route_stop_signals();
  K3_CHECK(!g_listening.load(), "stop signals are already being listened for");
  g_requested.store(0);
  g_listening.store(true);
}

StopSignals::~StopSignals() { g_listening.store(false); }

int StopSignals::requested() const { return g_requested.load(); }

StopNote::StopNote(std::function<void()> note) {
  const std::lock_guard<std::mutex> hold(g_note_mutex);
  K3_CHECK(!g_note, "a stop note is already set");
  g_note = std::move(note);
}

StopNote::~StopNote() {
  const std::lock_guard<std::mutex> hold(g_note_mutex);
  g_note = nullptr;
}

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
