#include "train/train_log.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/error.h"

namespace zaya::train {

namespace {

// Where say() goes: stderr unless a RunLog of a rank other than 0 is active, and that RunLog's rank log.
struct LogSink {
  bool to_stderr = true;
  std::FILE* file = nullptr;
};
LogSink g_log;

}  // namespace

void say(const char* fmt, ...) {
  va_list ap;
  if (g_log.to_stderr) {
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  if (g_log.file) {
    va_start(ap, fmt);
    std::vfprintf(g_log.file, fmt, ap);
    va_end(ap);
    std::fflush(g_log.file);
  }
}

RunLog::RunLog(const std::string& rank_log_dir, const std::string& out_dir, int rank, bool root) {
  namespace fs = std::filesystem;
  g_log.to_stderr = root;
  if (!rank_log_dir.empty()) {
    fs::create_directories(rank_log_dir);
    const std::string path = str_cat(rank_log_dir, "/rank", rank, ".log");
    g_log.file = std::fopen(path.c_str(), "w");
    ZAYA_CHECK(g_log.file, path, ": cannot write the rank's log");
  }
  if (root) fs::create_directories(out_dir);
}

RunLog::~RunLog() {
  if (g_log.file) std::fclose(g_log.file);
  g_log = {};
}

void heartbeat(bool root, int64_t step, const char* phase) {
  static const char* path = std::getenv("ZAYA_HEARTBEAT_FILE");
  if (!root || !path) return;
  std::FILE* f = std::fopen(path, "w");
  if (!f) return;  // liveness is advisory: never stop training for it
  std::fprintf(f, "%lld %s\n", (long long)step, phase);
  std::fclose(f);
}

int run_with_heartbeat(const std::string& command, bool root, int64_t step, const char* phase) {
  heartbeat(root, step, phase);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  for (int ticks = 1;; ticks++) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (ticks % 20 == 0) heartbeat(root, step, phase);
  }
}

void EventLog::open(const std::string& path, bool root) {
  root_ = root;
  if (root_) out_.open(path, std::ios::app);
}

void EventLog::write(const nlohmann::json& event) {
  if (root_) out_ << event.dump() << "\n" << std::flush;
}

void MetricsLog::open(bool append) {
  if (!root_) return;
  out_.open(path_, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  ZAYA_CHECK(out_.good(), path_, ": cannot write");
}

void MetricsLog::write(const nlohmann::json& row) {
  if (!root_) return;
  out_ << row.dump() << "\n";
  out_.flush();
}

void MetricsLog::truncate(int64_t first_step) {
  namespace fs = std::filesystem;
  if (!root_) return;
  const bool reopen = out_.is_open();
  out_.close();
  if (fs::exists(path_)) {
    std::ifstream in(path_);
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("step") || j["step"].get<int64_t>() >= first_step) break;
      kept += line + "\n";
    }
    in.close();
    std::ofstream(path_ + ".tmp", std::ios::binary) << kept;
    fs::rename(path_ + ".tmp", path_);
  }
  if (reopen) open(true);
}

}  // namespace zaya::train
