// Fault-tolerance supervisor behind `zaya launch` (docs/fault-tolerance.md): runs a training command, and
// restarts it after a crash or a hang (heartbeat timeout) until it succeeds or the restart budget is spent.
//
// The command is started with fork + execvp in its own process group (so that one signal reaches mpirun and
// every rank), stdin from /dev/null (a background process group must not read the terminal) and the
// environment variable ZAYA_HEARTBEAT_FILE pointing at the liveness file that rank 0 of `zaya train`
// rewrites after every step and around every checkpoint save. Each attempt ends one of four ways:
//   exit     the command exited; 0 is success, anything else a crash
//   signal   the command died by a signal (kill -9, OOM killer, segfault)
//   hang     no heartbeat for heartbeat_timeout_s (before the first one: startup_timeout_s); the supervisor
//            sends SIGTERM to the job, SIGKILL after kill_grace_s
//   stopped  the supervisor itself got SIGTERM / SIGINT / SIGUSR1: forwarded to the job (the trainer then
//            saves a checkpoint and exits 0); no restart follows
// A failed attempt is followed by a backoff wait (backoff_s, doubled after each consecutive failure, capped
// at max_backoff_s; reset to backoff_s when the attempt reached a step beyond every earlier attempt) and a
// restart of the same command, which resumes by itself (`zaya train ... --resume auto`).
//
// A failure that a restart cannot fix (a missing file, an invalid config) is not retried: when two attempts
// in a row exit non-zero before the job's first step (no heartbeat past "started") with the same exit code
// and the same error line on stderr, the supervisor gives up at once and says so. To see that line the
// job's stderr goes to a file that the supervisor copies to its own stderr as it grows (a file, not a pipe:
// a job whose supervisor died must not get SIGPIPE on its next progress line).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zaya::launch {

struct LaunchOptions {
  std::vector<std::string> command;  // argv of the job, command[0] looked up in PATH
  int max_restarts = 3;              // restarts after failures before giving up
  double heartbeat_timeout_s = 600;  // 0 = no hang detection once the job has sent a heartbeat
  double startup_timeout_s = 1800;   // grace before the first heartbeat of an attempt; 0 = none
  double backoff_s = 1;              // wait before the first restart
  double max_backoff_s = 60;         // cap of the doubled waits
  double kill_grace_s = 10;          // SIGTERM, then SIGKILL after this long
  std::string heartbeat_file;        // empty: <a fresh temp dir>/heartbeat, removed at the end
  std::string report_file;           // empty: none; else the JSON report, rewritten after every attempt
  double poll_s = 0.05;              // how often the child, the heartbeat and signals are checked
};

// One run of the command.
struct Attempt {
  int number = 0;              // 1-based
  std::string started_at;      // local wall-clock time, "YYYY-MM-DD HH:MM:SS"
  double start_s = 0;          // seconds since the supervisor started
  double duration_s = 0;       // until the job (every process of it) was gone
  std::string ended;           // "exit" | "signal" | "hang" | "stopped"
  int exit_code = -1;          // the command's exit code when it exited, else -1
  int signal = 0;              // the signal that killed the command, else 0
  std::string hang_reason;     // for "hang": "no heartbeat for 5.0 s" / "no first heartbeat within 30.0 s"
  std::string stop_signal;     // for "stopped": the forwarded signal ("SIGTERM")
  std::string killed_with;     // the strongest signal the supervisor sent the job ("SIGTERM" / "SIGKILL")
  std::string last_heartbeat;  // the last heartbeat content seen ("7 step"), empty when none
  int64_t max_step = -1;       // the highest heartbeat step seen, -1 when none
  bool stepped = false;        // a heartbeat other than "<n> started" was seen: the job got to its steps
  std::string error;           // the job's last stderr line naming an error (else its last line); "" if none
  bool progressed = false;     // max_step beyond every earlier attempt's
  double backoff_s = 0;        // the wait before the next attempt (0 when none followed)
  bool succeeded() const { return ended == "exit" && exit_code == 0; }
  // Exited non-zero before its first step with an error line: a failure in set-up (config, files).
  bool failed_in_setup() const { return ended == "exit" && exit_code != 0 && !stepped && !error.empty(); }
  // "attempt 3: killed by SIGKILL after 12.4 s (last heartbeat: 7 step)".
  std::string describe() const;
};

struct LaunchReport {
  std::vector<std::string> command;
  std::vector<Attempt> attempts;
  std::string outcome;  // "succeeded" | "gave up" | "stopped by SIGTERM" (...) | "running"
  std::string reason;   // why it gave up: "3 restart(s) ... failed too" / "the same error twice before ..."
  int exit_code = 0;    // what `zaya launch` exits with
  int restarts = 0;     // attempts started after a failure
  double wall_s = 0;
  nlohmann::json to_json() const;
  // A multi-line human report: the outcome, then one line per attempt.
  std::string to_text() const;
};

// Runs options.command under supervision (logging every event on stderr as "zaya launch: ...") and returns
// the report. Exit codes: 0 when an attempt succeeded; 1 after giving up (max_restarts restarts failed, or
// two attempts in a row failed in set-up with the same error: see the top of this file); the
// child's status (its exit code, or 128 + its death signal) when stopped by a forwarded signal, 128 + the
// signal when one arrives between attempts. Throws zaya::Error for bad options or a command that cannot be
// executed at all (not found, not executable). Installs handlers for SIGTERM / SIGINT / SIGUSR1 while it
// runs, makes the calling process a child subreaper (orphaned ranks are reparented to it and reaped) and
// reaps every child of the calling process: call it from a process that has no other children.
LaunchReport supervise(const LaunchOptions& options);

// "SIGKILL", "SIGTERM", ... or "signal <n>".
std::string signal_name(int sig);

}  // namespace zaya::launch
