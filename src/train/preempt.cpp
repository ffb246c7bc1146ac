#include "train/preempt.h"

#include <atomic>
#include <csignal>
#include <cstdio>

#include "core/error.h"

namespace zaya::train {

namespace {

// Written by the handler, read by the step loop: must be lock-free to be async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
struct sigaction g_previous[3];
bool g_installed = false;

// Async-signal-safe: an atomic store, or on a repeated signal signal() + raise() (both listed in POSIX).
extern "C" void on_preempt_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {
    std::signal(sig, SIG_DFL);  // asked twice: stop waiting for the step to end
    std::raise(sig);
  }
}

}  // namespace

PreemptGuard::PreemptGuard() {
  ZAYA_ASSERT(!g_installed, "one PreemptGuard at a time: the previous handlers would be lost");
  g_signal.store(0);
  struct sigaction sa = {};
  sa.sa_handler = on_preempt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // file writes and MPI waits in progress continue; the loop polls the flag
  for (int i = 0; i < 3; i++) sigaction(kSignals[i], &sa, &g_previous[i]);
  g_installed = true;
}

PreemptGuard::~PreemptGuard() {
  for (int i = 0; i < 3; i++) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

int preempt_signal() {
  return g_signal.load();
}

const char* preempt_signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      break;
  }
  static thread_local char buf[24];
  std::snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

}  // namespace zaya::train
