// What the trainer (train/trainer.cpp) reports while it runs, besides the model it writes at the end: log
// lines (say), the heartbeat file a supervisor watches, events.jsonl (rollbacks, skipped updates, failed
// saves) and metrics.jsonl (one row per step). Only rank 0 writes the files; with a rank log every rank also
// keeps its own log lines.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace zaya::train {

// A log line (printf format): to stderr on rank 0 and to the rank's log file while a RunLog routes them so;
// to stderr when none does.
__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...);

// The run's log route and output directory, for the lifetime of this object: say() writes to stderr only on
// rank 0 (`root`) and, with `rank_log_dir` set (created), to <rank_log_dir>/rank<rank>.log on every rank;
// rank 0 creates `out_dir`. Afterwards say() writes to stderr again. One at a time per process.
class RunLog {
 public:
  RunLog(const std::string& rank_log_dir, const std::string& out_dir, int rank, bool root);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;
};

// Liveness for a supervisor (`zaya launch`, src/launch/): with ZAYA_HEARTBEAT_FILE set, rank 0 (`root`)
// rewrites that file with "<step> <phase>\n" at start-up, after every step and around every checkpoint save;
// a supervisor that sees its modification time stop advancing treats the job as hung. Rank 0 suffices: a
// rank that hangs stops rank 0 at the next collective.
void heartbeat(bool root, int64_t step, const char* phase);

// Runs `command` with /bin/sh like std::system, rewriting the heartbeat ("<step> <phase>") every second until
// it exits, so that a slow helper (the plot script's matplotlib import on a loaded machine) is not taken
// for a hang. Returns std::system's status (-1 when it could not start).
int run_with_heartbeat(const std::string& command, bool root, int64_t step, const char* phase);

// events.jsonl: one JSON object per line, appended and flushed at once; rank 0 only (elsewhere write() does
// nothing).
class EventLog {
 public:
  void open(const std::string& path, bool root);
  void write(const nlohmann::json& event);

 private:
  bool root_ = false;
  std::ofstream out_;
};

// metrics.jsonl: one JSON row per step ({"step": n, ...}); rank 0 only (elsewhere every call does nothing).
class MetricsLog {
 public:
  MetricsLog(std::string path, bool root) : path_(std::move(path)), root_(root) {}
  // Opens the file, appending to its rows or truncating it; zaya::Error when it cannot be written.
  void open(bool append);
  void write(const nlohmann::json& row);
  // Keeps the rows of steps before `first_step` (a resumed or rolled-back run appends after them); an open
  // file stays open for appending.
  void truncate(int64_t first_step);

 private:
  std::string path_;
  bool root_;
  std::ofstream out_;
};

}  // namespace zaya::train
