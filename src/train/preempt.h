// Preemption signals (Slurm, Kubernetes, Ctrl-C): SIGTERM, SIGINT and SIGUSR1 ask the trainer to finish the
// step it is in, save a training checkpoint and exit 0, so that `--resume auto` continues the run.
//
// The handler only stores the signal number in a lock-free atomic (async-signal-safe); the step loop polls
// preempt_signal() between steps. A second signal of the same kinds while one is pending restores the
// default action and re-raises it: a second Ctrl-C ends the process at once.
#pragma once

namespace zaya::train {

// Installs the handlers for SIGTERM, SIGINT and SIGUSR1 (clearing any pending request) for the lifetime of
// this object and restores the previous handlers when it goes out of scope. One at a time per process.
class PreemptGuard {
 public:
  PreemptGuard();
  ~PreemptGuard();
  PreemptGuard(const PreemptGuard&) = delete;
  PreemptGuard& operator=(const PreemptGuard&) = delete;
};

// The signal number received since the guard was installed, or 0 when none.
int preempt_signal();

// "SIGTERM", "SIGINT", "SIGUSR1" or "signal <n>".
const char* preempt_signal_name(int sig);

}  // namespace zaya::train
