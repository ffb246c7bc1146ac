// The training loop of `zaya train` (single process): fp32 master weights, gradients and optimizer state;
// GEMMs in fp32 or bf16; Muon + AdamW with the ZAYA1 split; the balancing-bias controller after every step;
// gradient accumulation, global-norm clipping, warmup + cosine / WSD schedules; validation loss; metrics
// as JSONL; at the end an HF checkpoint, a sample generation and a loss / load-entropy plot.
// Under mpirun / srun (dist/comm.h) it trains data-parallel with a ZeRO-1 optimizer (dist/zero1.h): batch
// sizes in TRAIN.json are global (micro_batch rows split over the ranks), so the same file gives the same
// run for any number of ranks; only rank 0 prints and writes files (docs/distributed.md).
// With "checkpoint.every" it saves training checkpoints asynchronously (every rank its own shards) that
// RunOptions::resume continues from bit-identically: same parameters, optimizer and balancer state, data
// order and losses. Bad steps (non-finite, loss spikes) apply no update; too many in a row roll back to the
// newest checkpoint (train/bad_steps.h, docs/fault-tolerance.md).
// A run directory belongs to one run (train/run_start.h): the run records its identity (train/run_identity.h)
// in <out>/run.json and its checkpoints, refuses to start in another run's directory unless
// RunOptions::overwrite, refuses to resume another config's checkpoint, and leaves a finished run as it is.
#pragma once

#include <string>

#include "train/train_config.h"

namespace zaya::train {

struct TrainSummary {
  int64_t steps = 0;
  double final_train_loss = 0, final_val_loss = 0;
  double seconds = 0;
  int64_t skipped_steps = 0;      // bad steps (non-finite loss or gradient, loss spikes): no update applied
  std::string stopped;            // non-empty: the run stopped early for this reason (a failed save with
                                  // checkpoint.on_error = stop); the caller exits non-zero
  bool time_limited = false;      // max_minutes ended the run before its last step
  bool already_complete = false;  // the resumed run had already finished: nothing was trained or written
};

struct RunOptions {
  std::string rank_log_dir;  // when set, every rank writes its own log lines to <dir>/rank<r>.log
  bool overlap = false;      // data parallel: start each block's (nonblocking) reductions during the backward
  // Continue from a training checkpoint (ckpt/checkpoint.h): "" = start fresh; "auto" = the newest checkpoint
  // under the config's checkpoint.dir whose checksums verify (newer broken ones are reported and skipped;
  // no committed one = start fresh); else a step directory. Any world size loads it (resharding); bit-exact
  // continuation needs the world size and thread count that saved it.
  std::string resume;
  // A fresh start into directories that hold another run's files (train/run_start.h) removes them first
  // instead of refusing; not with `resume`.
  bool overwrite = false;
};

TrainSummary run_training(const TrainConfig& cfg, const RunOptions& run = {});

}  // namespace zaya::train
