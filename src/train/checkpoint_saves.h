// The trainer's training checkpoints (train/trainer.cpp; "checkpoint" in TRAIN.json): a save stages this
// rank's state (the training stall) and writes it in the background (ckpt/async_saver.h); the commit (rank
// 0: manifest, COMPLETE, retention) follows at the first step boundary where every rank's write has
// finished, decided collectively so that all ranks agree. One save in flight at most. A failed save leaves
// the previous checkpoint untouched and, with checkpoint.on_error = stop, ends the run. Every save belongs to
// the run's identity (train/run_identity.h): retention removes only this run's checkpoints, and a save
// never replaces another run's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "dist/comm.h"
#include "train/run_identity.h"
#include "train/train_config.h"
#include "train/train_log.h"

namespace zaya::train {

class CheckpointSaves {
 public:
  // Saves under c.ckpt_dir with c.ckpt_io_threads write streams; `events` gets a line per failed save.
  CheckpointSaves(const TrainConfig& c, dist::Comm& comm, EventLog& events);

  // The run the saves belong to (before the first save): its checkpoints are the ones retention considers,
  // and the first commit records it as <checkpoint.dir>/run.json.
  void set_identity(const RunIdentity& id) { identity_ = id; }

  // Allocates and pre-faults the staging buffer for `bytes` ahead of the first save (AsyncSaver::reserve).
  void reserve(size_t bytes) { saver_.reserve(bytes); }

  // Saves training step `step`, which the run has just finished: waits for the save in flight, then stages
  // `tensors()` (this rank's) and starts their background write; `state()` (the manifest's "state": loader
  // position, counters) is captured now and committed with them. Collective. Without checkpoint.async it
  // also waits for the commit.
  void save(int64_t step, const std::function<std::vector<ckpt::TensorEntry>()>& tensors,
            const std::function<nlohmann::json()>& state);

  // Commits the save in flight if every rank's write has finished (block: waits for this rank's write
  // first); a failed one is reported and dropped. `reached`: the step the run has reached (the heartbeat's).
  // Collective in a world of more than one rank.
  void settle(bool block, int64_t reached);

  int64_t last_good_step() const { return last_good_step_; }  // the newest committed by this run, or -1
  int64_t failed_step() const { return failed_step_; }        // on_error = stop: the save that failed, or -1
  void report_stalls() const;                                 // the training stall per save, as a log line

 private:
  struct Pending {
    int64_t step = 0;
    std::string dir;
    nlohmann::json state;  // captured when staged: the loader and counters of that step
    std::chrono::steady_clock::time_point t0;
    double stall_s = 0;
    int64_t local = 0;  // this rank's write: 0 in flight, 1 written, 2 failed
    std::string error;
  };
  int64_t all_ranks_status();  // 0 if any rank still writes, else 2 if any failed, else 1
  void drop_failed(const Pending& p);
  void commit(const Pending& p, int64_t reached);

  bool is_ours(const std::string& step_dir) const;

  const TrainConfig& c_;
  RunIdentity identity_;
  dist::Comm& comm_;
  EventLog& events_;
  const int rank_, world_;
  const bool root_;
  ckpt::AsyncSaver saver_;
  std::optional<Pending> pending_;
  int64_t last_good_step_ = -1;
  int64_t failed_step_ = -1;
  double stall_total_ = 0, stall_max_ = 0;
  int64_t saves_ = 0;
};

}  // namespace zaya::train
