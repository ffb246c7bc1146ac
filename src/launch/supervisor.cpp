// The supervisor loop of `zaya launch` (supervisor.h): one attempt = fork/exec the command in its own
// process group, poll (child status, heartbeat file, our own signals) every poll_s, end the attempt on exit,
// death, hang or a forwarded stop signal, clean up whatever is left of the job, back off, restart.
#include "launch/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace zaya::launch {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void log(const std::string& msg) {
  std::fprintf(stderr, "zaya launch: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string local_time_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// ---- our own signals: the handler only counts and records (async-signal-safe); the loop polls ----

std::atomic<int> g_signal_count{0};
std::atomic<int> g_last_signal{0};

void on_stop_signal(int sig) {
  g_last_signal.store(sig);
  g_signal_count.fetch_add(1);
}

// Installs the handlers for the lifetime of the object; restores the previous ones after.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(kSignals[i], &sa, &old_[i]);
    g_signal_count.store(0);
    g_last_signal.store(0);
  }
  ~StopSignals() {
    for (int i = 0; i < 3; i++) sigaction(kSignals[i], &old_[i], nullptr);
  }

 private:
  static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};
  struct sigaction old_[3];
};

// ---- the job's processes ----

struct ProcInfo {
  pid_t ppid = 0, pgrp = 0;
  char state = '?';
};

// Every process visible in /proc with its parent, group and state ("pid (comm) S ppid pgrp ..."; comm may
// contain spaces and parentheses, so parse after the last ')').
std::map<pid_t, ProcInfo> process_table() {
  std::map<pid_t, ProcInfo> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;  // gone meanwhile
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    ProcInfo p;
    int ppid = 0, pgrp = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d %d", &p.state, &ppid, &pgrp) != 3) continue;
    p.ppid = ppid;
    p.pgrp = pgrp;
    out[pid_t(pid)] = p;
  }
  closedir(d);
  return out;
}

// The live (not zombie) processes of the job: those in its process group, and every descendant of this
// process (ranks that moved to a group of their own are still our descendants: we are their subreaper).
// With `outside_only`, just the descendants in other process groups (Open MPI's ranks).
std::vector<pid_t> job_processes(pid_t pgid, bool outside_only = false) {
  const pid_t self = getpid();
  const auto table = process_table();
  std::vector<pid_t> out;
  for (const auto& [pid, info] : table) {
    if (outside_only && info.pgrp == pgid) continue;
    if (pid == self || info.state == 'Z' || info.state == 'X') continue;
    bool ours = info.pgrp == pgid;
    // Walk up the parents (bounded: a cycle cannot happen, but a table read mid-change could be odd).
    pid_t up = info.ppid;
    for (int hops = 0; !ours && up > 1 && hops < 64; hops++) {
      if (up == self) ours = true;
      auto it = table.find(up);
      if (it == table.end()) break;
      up = it->second.ppid;
    }
    if (ours) out.push_back(pid);
  }
  return out;
}

// Ending the job: `sig` to its process group and to every descendant in another group, each process once
// (a second SIGTERM makes `zaya train` exit at once instead of finishing its step).
void signal_job(pid_t pgid, int sig) {
  kill(-pgid, sig);
  for (pid_t p : job_processes(pgid, /*outside_only=*/true)) kill(p, sig);
}

// Reaps every finished child (the command, and orphaned job processes reparented to us); records the
// command's status when it is among them.
void reap(pid_t leader, bool* leader_done, int* leader_status) {
  int st = 0;
  pid_t r;
  while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
    if (r == leader) {
      *leader_done = true;
      *leader_status = st;
    }
  }
}

// Waits (reaping) until no process of the job is left or `seconds` pass. True when none is left.
bool wait_job_gone(pid_t pgid, pid_t leader, bool* leader_done, int* leader_status, double seconds,
                   double poll_s) {
  const auto t0 = Clock::now();
  for (;;) {
    reap(leader, leader_done, leader_status);
    if (*leader_done && job_processes(pgid).empty()) return true;
    if (seconds_between(t0, Clock::now()) >= seconds) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_s));
  }
}

// SIGTERM to the whole job, SIGKILL after the grace; returns the strongest signal that was needed.
std::string terminate_job(pid_t pgid, pid_t leader, bool* leader_done, int* leader_status,
                          const LaunchOptions& o) {
  signal_job(pgid, SIGTERM);
  if (wait_job_gone(pgid, leader, leader_done, leader_status, o.kill_grace_s, o.poll_s)) return "SIGTERM";
  log(str_cat("the job is still running ", fixed1(o.kill_grace_s), " s after SIGTERM: SIGKILL"));
  signal_job(pgid, SIGKILL);
  // SIGKILL cannot be ignored; what might remain is a process stuck in the kernel (D state, e.g. a hung
  // network file system). Do not wait forever for it: report and go on.
  if (!wait_job_gone(pgid, leader, leader_done, leader_status, 30, o.poll_s)) {
    const auto left = job_processes(pgid);
    log(str_cat(left.size(), " process(es) of the job survived SIGKILL for 30 s (first: pid ",
                left.empty() ? 0 : left[0], "); continuing without them"));
    if (!*leader_done && waitpid(leader, leader_status, 0) == leader) *leader_done = true;
  }
  return "SIGKILL";
}

// ---- the heartbeat file ----

struct Heartbeat {
  bool seen = false;
  timespec mtime{};
  Clock::time_point last_change;
  std::string content;  // the last non-empty content
  int64_t max_step = -1;
  bool stepped = false;  // a content other than "<n> started" was seen
};

// Checks the file; on a new modification time records the change and the content ("<step> <phase>").
void poll_heartbeat(const std::string& path, Heartbeat* hb) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return;
  if (hb->seen && st.st_mtim.tv_sec == hb->mtime.tv_sec && st.st_mtim.tv_nsec == hb->mtime.tv_nsec) return;
  hb->seen = true;
  hb->mtime = st.st_mtim;
  hb->last_change = Clock::now();
  std::ifstream f(path);
  std::string line;
  // The writer truncates then writes: an empty read is a rewrite in progress; the next poll sees the rest.
  if (!std::getline(f, line) || line.empty()) return;
  hb->content = line;
  long long step = 0;
  char phase[32] = "";
  const int fields = std::sscanf(line.c_str(), "%lld %31s", &step, phase);
  if (fields >= 1 && step > hb->max_step) hb->max_step = step;
  if (fields < 2 || std::strcmp(phase, "started") != 0) hb->stepped = true;
}

// ---- the job's stderr: a file that we copy to our own stderr as it grows ----

class StderrTail {
 public:
  explicit StderrTail(std::string path) : path_(std::move(path)) {}
  ~StderrTail() {
    if (fd_ >= 0) close(fd_);
  }
  const std::string& path() const { return path_; }
  // Copies what the job wrote since the last call to our stderr and keeps the last kKeep bytes.
  void pump() {
    if (fd_ < 0) fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return;  // the child has not created it yet
    char buf[65536];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof buf)) > 0) {
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = write(2, buf + off, size_t(n - off));
        if (w <= 0) break;  // our stderr is gone: keep reading so that the error line is still found
        off += w;
      }
      tail_.append(buf, size_t(n));
      if (tail_.size() > 2 * kKeep) tail_.erase(0, tail_.size() - kKeep);
    }
  }
  // The last line that names an error ("zaya train: error: ...", "Error", "ERROR"), else the last non-empty
  // line; at most 400 characters.
  std::string error_line() const {
    std::string last, last_error;
    size_t start = 0;
    while (start < tail_.size()) {
      size_t end = tail_.find('\n', start);
      if (end == std::string::npos) end = tail_.size();
      std::string line = tail_.substr(start, end - start);
      start = end + 1;
      if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (line.empty()) continue;
      if (line.size() > 400) line = line.substr(0, 400);
      last = line;
      std::string lower = line;
      for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
      if (lower.find("error") != std::string::npos) last_error = line;
    }
    return last_error.empty() ? last : last_error;
  }

 private:
  static constexpr size_t kKeep = 16384;
  std::string path_;
  int fd_ = -1;
  std::string tail_;
};

// ---- one attempt ----

std::vector<std::string> child_environment(const std::string& heartbeat_file) {
  std::vector<std::string> env;
  const std::string key = "ZAYA_HEARTBEAT_FILE=";
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, key.c_str(), key.size()) != 0) env.push_back(*e);
  env.push_back(key + heartbeat_file);
  return env;
}

// Forks and execs the command in a new process group with its stderr in `stderr_file` (created, truncated).
// Throws zaya::Error when it cannot be executed (the child reports execvp's errno through a close-on-exec
// pipe: no bytes = the exec succeeded).
pid_t start_command(const LaunchOptions& o, const std::string& heartbeat_file,
                    const std::string& stderr_file) {
  std::vector<std::string> env = child_environment(heartbeat_file);
  std::vector<char*> argv, envp;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int fds[2];
  ZAYA_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = fork();
  ZAYA_CHECK(pid >= 0, "fork: ", std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls from here to the exec.
    close(fds[0]);
    setpgid(0, 0);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    const int err_fd = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (err_fd >= 0) dup2(err_fd, 2);  // when it cannot be created the job keeps our stderr
    execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    ssize_t ignored = write(fds[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also here: whichever of parent and child runs first, the group exists before use
  close(fds[1]);
  int err = 0;
  ssize_t n;
  do n = read(fds[0], &err, sizeof err);
  while (n < 0 && errno == EINTR);
  close(fds[0]);
  if (n == ssize_t(sizeof err)) {
    int st;
    waitpid(pid, &st, 0);
    throw Error(str_cat("cannot run '", o.command[0], "': ", std::strerror(err)));
  }
  return pid;
}

// Runs one attempt to its end (fills everything but number, progressed and backoff_s).
void run_attempt(const LaunchOptions& o, const std::string& heartbeat_file, StderrTail& err,
                 Clock::time_point t_launch, Attempt* a) {
  fs::remove(heartbeat_file);  // a stale heartbeat from the previous attempt must not count
  a->started_at = local_time_now();
  const auto t0 = Clock::now();
  a->start_s = seconds_between(t_launch, t0);
  const int signals_before = g_signal_count.load();
  const pid_t pid = start_command(o, heartbeat_file, err.path());
  log(str_cat("attempt ", a->number, " started (pid ", pid, "): ", join(o.command)));
  const pid_t pgid = pid;
  Heartbeat hb;
  bool done = false;
  int status = 0;
  int forwarded = signals_before;
  for (;;) {
    reap(pid, &done, &status);
    if (done) break;
    // Our own stop signals: forward each one (a second one makes the trainer exit at once).
    const int count = g_signal_count.load();
    if (count != forwarded) {
      forwarded = count;
      const int sig = g_last_signal.load();
      a->stop_signal = signal_name(sig);
      log(str_cat("received ", a->stop_signal, ": forwarding it to the job (process group ", pgid,
                  ") and not restarting"));
      // The group only, as a terminal or Slurm would: a launcher in it (mpirun) forwards to its ranks.
      kill(-pgid, sig);
    }
    poll_heartbeat(heartbeat_file, &hb);
    err.pump();
    const auto now = Clock::now();
    if (a->stop_signal.empty()) {
      if (!hb.seen && o.startup_timeout_s > 0 && seconds_between(t0, now) > o.startup_timeout_s)
        a->hang_reason = str_cat("no first heartbeat within ", fixed1(o.startup_timeout_s), " s");
      else if (hb.seen && o.heartbeat_timeout_s > 0 &&
               seconds_between(hb.last_change, now) > o.heartbeat_timeout_s)
        a->hang_reason = str_cat("no heartbeat for ", fixed1(seconds_between(hb.last_change, now)), " s");
      if (!a->hang_reason.empty()) {
        log(str_cat("attempt ", a->number, " hangs (", a->hang_reason,
                    hb.content.empty() ? "" : ", last heartbeat: " + hb.content, "): SIGTERM to the job"));
        a->killed_with = terminate_job(pgid, pid, &done, &status, o);
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_s));
  }
  // The command has ended; ranks or helpers it left behind must not outlive the attempt.
  if (!job_processes(pgid).empty()) {
    log(str_cat("processes of attempt ", a->number, " outlived its command: SIGTERM to them"));
    const std::string k = terminate_job(pgid, pid, &done, &status, o);
    if (a->killed_with != "SIGKILL") a->killed_with = k;
  }
  poll_heartbeat(heartbeat_file, &hb);  // a heartbeat written just before the end
  err.pump();
  a->duration_s = seconds_between(t0, Clock::now());
  a->last_heartbeat = hb.content;
  a->max_step = hb.max_step;
  a->stepped = hb.stepped;
  a->error = err.error_line();
  if (WIFEXITED(status)) a->exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) a->signal = WTERMSIG(status);
  if (!a->hang_reason.empty())
    a->ended = "hang";
  else if (!a->stop_signal.empty())
    a->ended = "stopped";
  else
    a->ended = WIFSIGNALED(status) ? "signal" : "exit";
}

void write_report(const LaunchReport& r, const std::string& path) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << r.to_json().dump(2) << "\n";
    if (!f.good()) {
      log(str_cat("cannot write the report ", tmp));
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // readers never see a half-written report
  if (ec) log(str_cat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
}

// Sleeps `seconds`, returning early (true) when a stop signal arrives.
bool interruptible_sleep(double seconds, double poll_s) {
  const int before = g_signal_count.load();
  const auto t0 = Clock::now();
  while (seconds_between(t0, Clock::now()) < seconds) {
    if (g_signal_count.load() != before) return true;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(poll_s, seconds)));
  }
  return g_signal_count.load() != before;
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    default:
      return str_cat("signal ", sig);
  }
}

std::string Attempt::describe() const {
  std::string how;
  const std::string after = str_cat(" after ", fixed1(duration_s), " s");
  if (ended == "hang") {
    how = str_cat("hung (", hang_reason, "), killed with ", killed_with, after);
  } else if (ended == "stopped") {
    how =
        str_cat("stopped by ", stop_signal, " (forwarded), ",
                signal ? "killed by " + signal_name(signal) : str_cat("exited with code ", exit_code), after);
  } else if (ended == "signal") {
    how = str_cat("killed by ", signal_name(signal), after);
  } else if (exit_code == 0) {
    how = str_cat("succeeded", after);
  } else {
    how = str_cat("exited with code ", exit_code, after);
  }
  std::string out = str_cat(
      "attempt ", number, " (started ", started_at, "): ", how, " (",
      last_heartbeat.empty() ? std::string("no heartbeat") : "last heartbeat: " + last_heartbeat, ")");
  if (ended == "exit" && exit_code != 0 && !error.empty()) out += ": " + error;
  return out;
}

nlohmann::json LaunchReport::to_json() const {
  nlohmann::json at = nlohmann::json::array();
  for (const Attempt& a : attempts) {
    nlohmann::json j = {{"attempt", a.number},      {"started_at", a.started_at},
                        {"start_s", a.start_s},     {"duration_s", a.duration_s},
                        {"ended", a.ended},         {"last_heartbeat", a.last_heartbeat},
                        {"max_step", a.max_step},   {"progressed", a.progressed},
                        {"backoff_s", a.backoff_s}, {"description", a.describe()}};
    j["exit_code"] = a.exit_code >= 0 ? nlohmann::json(a.exit_code) : nlohmann::json(nullptr);
    j["signal"] = a.signal ? nlohmann::json(signal_name(a.signal)) : nlohmann::json(nullptr);
    if (!a.hang_reason.empty()) j["hang_reason"] = a.hang_reason;
    if (!a.stop_signal.empty()) j["stop_signal"] = a.stop_signal;
    if (!a.killed_with.empty()) j["killed_with"] = a.killed_with;
    if (!a.error.empty()) j["error"] = a.error;
    j["stepped"] = a.stepped;
    at.push_back(j);
  }
  nlohmann::json j = {{"command", command},   {"outcome", outcome}, {"exit_code", exit_code},
                      {"restarts", restarts}, {"wall_s", wall_s},   {"attempts", at}};
  if (!reason.empty()) j["reason"] = reason;
  return j;
}

std::string LaunchReport::to_text() const {
  std::string out = str_cat("zaya launch: report: ", outcome, " after ", attempts.size(), " attempt(s), ",
                            restarts, " restart(s), ", fixed1(wall_s), " s; exit code ", exit_code, "\n");
  if (!reason.empty()) out += "zaya launch:   why: " + reason + "\n";
  for (const Attempt& a : attempts) {
    out += "zaya launch:   " + a.describe();
    if (a.backoff_s > 0) out += str_cat("; restarted after ", fixed1(a.backoff_s), " s");
    out += "\n";
  }
  return out;
}

LaunchReport supervise(const LaunchOptions& o) {
  ZAYA_CHECK(!o.command.empty(), "no command given (usage: zaya launch [options] -- <command...>)");
  ZAYA_CHECK(o.max_restarts >= 0, "--max-restarts must be >= 0, got ", o.max_restarts);
  ZAYA_CHECK(o.heartbeat_timeout_s >= 0 && o.startup_timeout_s >= 0, "timeouts must be >= 0");
  ZAYA_CHECK(o.backoff_s >= 0 && o.max_backoff_s >= 0 && o.kill_grace_s >= 0,
             "--backoff, --max-backoff and --kill-grace must be >= 0");
  ZAYA_CHECK(o.poll_s > 0, "the poll interval must be > 0");

  // The temp dir holds the job's stderr file (and the heartbeat file unless one is given).
  std::string temp_dir = (fs::temp_directory_path() / "zaya_launch_XXXXXX").string();
  ZAYA_CHECK(mkdtemp(temp_dir.data()), "cannot create a temp dir ", temp_dir, ": ", std::strerror(errno));
  const std::string stderr_file = temp_dir + "/job.stderr";
  std::string heartbeat_file = o.heartbeat_file;
  if (heartbeat_file.empty()) {
    heartbeat_file = temp_dir + "/heartbeat";
  } else {
    const fs::path parent = fs::absolute(heartbeat_file).parent_path();
    ZAYA_CHECK(fs::is_directory(parent), "--heartbeat-file ", heartbeat_file, ": its directory ",
               parent.string(), " does not exist");
    heartbeat_file = fs::absolute(heartbeat_file).string();  // the job may change its working directory
  }
  if (!o.report_file.empty()) {
    const fs::path parent = fs::absolute(o.report_file).parent_path();
    ZAYA_CHECK(fs::is_directory(parent), "--report ", o.report_file, ": its directory ", parent.string(),
               " does not exist");
  }
  bool has_resume = false;
  for (const auto& a : o.command) has_resume |= a.find("--resume") != std::string::npos;  // also in sh -c
  if (!has_resume)
    log("note: the command has no --resume option; every restart starts the job over (zaya train: add "
        "--resume auto)");

  // Orphaned job processes (ranks whose mpirun died) are reparented to us, so that we can reap and kill
  // them instead of leaving them to init.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  StopSignals stop_signals;
  const auto t_launch = Clock::now();
  LaunchReport r;
  r.command = o.command;
  r.outcome = "running";
  int64_t best_step = -1;
  int consecutive_failures = 0;
  for (int number = 1;; number++) {
    Attempt a;
    a.number = number;
    try {
      fs::remove(stderr_file);  // the previous attempt's: its tail must not be read as this one's
      StderrTail err(stderr_file);
      run_attempt(o, heartbeat_file, err, t_launch, &a);
    } catch (...) {
      fs::remove_all(temp_dir);
      throw;
    }
    a.progressed = a.max_step > best_step;
    best_step = std::max(best_step, a.max_step);
    log(a.describe());
    r.attempts.push_back(a);
    Attempt& last = r.attempts.back();
    r.wall_s = seconds_between(t_launch, Clock::now());
    if (a.ended == "stopped") {
      r.outcome = "stopped by " + a.stop_signal;
      r.exit_code = a.signal ? 128 + a.signal : a.exit_code;
      break;
    }
    if (a.succeeded()) {
      r.outcome = "succeeded";
      r.exit_code = 0;
      break;
    }
    if (r.restarts >= o.max_restarts) {
      r.outcome = "gave up";
      r.exit_code = 1;
      r.reason = str_cat(r.restarts, " restart(s) of --max-restarts ", o.max_restarts, " used and attempt ",
                         number, " failed too");
      log("giving up: " + r.reason);
      break;
    }
    // A set-up failure seen twice (same exit code, same error line) is not something a restart fixes.
    if (r.attempts.size() >= 2) {
      const Attempt& prev = r.attempts[r.attempts.size() - 2];
      if (a.failed_in_setup() && prev.failed_in_setup() && a.exit_code == prev.exit_code &&
          a.error == prev.error) {
        r.outcome = "gave up";
        r.exit_code = 1;
        r.reason = str_cat("attempts ", prev.number, " and ", number,
                           " failed before the job's first step with the same error (exit code ", a.exit_code,
                           ": ", a.error, "); a restart cannot fix that: fix the command or its inputs");
        log("giving up: " + r.reason);
        break;
      }
    }
    // Backoff: doubled per consecutive failure; an attempt that got further than any before resets it.
    if (a.progressed && consecutive_failures > 0)
      log(str_cat("attempt ", number, " reached step ", a.max_step,
                  ", beyond every earlier attempt: backoff reset"));
    consecutive_failures = a.progressed ? 1 : consecutive_failures + 1;
    double wait = o.backoff_s;
    for (int i = 1; i < consecutive_failures && wait < o.max_backoff_s; i++) wait *= 2;
    wait = std::min(wait, o.max_backoff_s);
    last.backoff_s = wait;
    write_report(r, o.report_file);
    log(str_cat("restart ", r.restarts + 1, " of at most ", o.max_restarts, " in ", fixed1(wait), " s"));
    if (interruptible_sleep(wait, o.poll_s)) {
      const int sig = g_last_signal.load();
      log(str_cat("received ", signal_name(sig), " while waiting to restart: stopping"));
      last.backoff_s = 0;
      r.outcome = "stopped by " + signal_name(sig);
      r.exit_code = 128 + sig;
      break;
    }
    r.restarts++;
  }
  r.wall_s = seconds_between(t_launch, Clock::now());
  write_report(r, o.report_file);
  fs::remove_all(temp_dir);
  return r;
}

}  // namespace zaya::launch
