#include "train/checkpoint_saves.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace zaya::train {

namespace fs = std::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

ckpt::AsyncSaveOptions save_options(const TrainConfig& c) {
  ckpt::AsyncSaveOptions o;
  o.io_threads = int(c.ckpt_io_threads);
  return o;
}

}  // namespace

CheckpointSaves::CheckpointSaves(const TrainConfig& c, dist::Comm& comm, EventLog& events)
    : c_(c),
      comm_(comm),
      events_(events),
      rank_(comm.rank()),
      world_(comm.size()),
      root_(comm.is_root()),
      saver_(save_options(c)) {}

void CheckpointSaves::save(int64_t step, const std::function<std::vector<ckpt::TensorEntry>()>& tensors,
                           const std::function<nlohmann::json()>& state) {
  settle(true, step);  // at most one save in flight
  const std::string dir = ckpt::step_dir(c_.ckpt_dir, step);
  heartbeat(root_, step, "saving");
  const auto t0 = clock_type::now();
  if (root_) {
    // An earlier attempt at this step of this run, or a directory that names no run (a save cut short, a
    // checkpoint from before run identities), is replaced; another run's committed checkpoint never is.
    const std::string owner = fs::exists(fs::path(dir) / "COMPLETE") ? checkpoint_run_id(dir) : "";
    ZAYA_CHECK(owner.empty() || owner == identity_.run_id, dir, " is a checkpoint of another run (run ",
               owner, "; this run is ", identity_.run_id,
               "): refusing to replace it. Give this run a checkpoint.dir "
               "of its own");
    ckpt::remove_partial(dir);
  }
  comm_.allgather(0, "checkpoint start");
  Pending p;
  p.step = step;
  p.dir = dir;
  p.t0 = t0;
  saver_.start(dir, rank_, tensors());
  p.state = state();
  p.stall_s = seconds_since(t0);
  stall_total_ += p.stall_s;
  stall_max_ = std::max(stall_max_, p.stall_s);
  saves_++;
  pending_ = std::move(p);
  if (!c_.ckpt_async) settle(true, step);
}

void CheckpointSaves::settle(bool block, int64_t reached) {
  if (!pending_) return;
  if (pending_->local == 0 && (block || saver_.idle())) {
    pending_->error = saver_.wait();
    pending_->local = pending_->error.empty() ? 1 : 2;
    if (!pending_->error.empty() && !root_)  // only rank 0 logs to stderr: other ranks say it themselves
      std::fprintf(stderr, "zaya train: rank %d: checkpoint step %ld failed: %s\n", rank_,
                   long(pending_->step), pending_->error.c_str());
  }
  const int64_t all = all_ranks_status();
  if (all == 0) return;
  const Pending p = std::move(*pending_);
  pending_.reset();
  if (all == 2)
    drop_failed(p);
  else
    commit(p, reached);
}

int64_t CheckpointSaves::all_ranks_status() {
  if (world_ == 1) return pending_->local;
  bool writing = false, failed = false;
  for (int64_t s : comm_.allgather(pending_->local, "checkpoint write status")) {
    writing |= s == 0;
    failed |= s == 2;
  }
  return writing ? 0 : failed ? 2 : 1;
}

void CheckpointSaves::drop_failed(const Pending& p) {
  // The previous checkpoint is untouched; the partial directory has no manifest and is removed.
  if (root_) {
    std::error_code ec;
    std::filesystem::remove_all(p.dir, ec);
  }
  say("train: WARNING: checkpoint at step %ld failed%s%s; the newest good checkpoint is %s; %s\n",
      long(p.step), p.error.empty() ? " on another rank" : ": ", p.error.c_str(),
      last_good_step_ >= 0 ? ckpt::step_dir(c_.ckpt_dir, last_good_step_).c_str() : "none from this run",
      c_.ckpt_on_error == "stop" ? "stopping (checkpoint.on_error = stop)"
                                 : "training continues (checkpoint.on_error = continue)");
  events_.write({{"event", "checkpoint_failed"}, {"step", p.step}, {"error", p.error}});
  if (c_.ckpt_on_error == "stop") failed_step_ = p.step;
}

void CheckpointSaves::commit(const Pending& p, int64_t reached) {
  heartbeat(root_, std::max(reached, p.step), "committing");  // the step reached, not the saved one
  if (root_) {
    ckpt::commit(p.dir, p.step, world_, p.state);
    write_run_json(c_.ckpt_dir, identity_, c_);  // once: a file of this run stays as it is
    auto removed = ckpt::apply_retention(c_.ckpt_dir, c_.ckpt_keep_last, c_.ckpt_keep_every,
                                         [&](const std::string& d) { return is_ours(d); });
    const ckpt::AsyncSaveStats& s = saver_.last_stats();
    say("train: checkpoint %s committed: %.1f MB per rank staged in %.3f s (the training stall), written "
        "in "
        "%.2f s (%.0f MB/s%s) while training went on, %.2f s from staging to commit%s\n",
        p.dir.c_str(), s.bytes / 1e6, p.stall_s, s.write_s, s.bytes / 1e6 / std::max(s.write_s, 1e-9),
        s.direct ? ", O_DIRECT" : ", buffered", seconds_since(p.t0),
        removed.empty() ? "" : str_cat("; retention removed ", removed.size()).c_str());
  }
  last_good_step_ = p.step;
  heartbeat(root_, std::max(reached, p.step), "saved");
}

bool CheckpointSaves::is_ours(const std::string& step_dir) const {
  return checkpoint_run_id(step_dir) == identity_.run_id;
}

void CheckpointSaves::report_stalls() const {
  if (saves_ > 0)
    say("train: %ld checkpoints: training stall %.3f s mean, %.3f s max per save\n", long(saves_),
        stall_total_ / double(saves_), stall_max_);
}

}  // namespace zaya::train
