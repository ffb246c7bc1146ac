// How a training run starts (train/trainer.cpp, before its first step). A run directory belongs to one run
// (train/run_identity.h):
//   - A fresh start (no --resume, or --resume auto with no committed checkpoint) needs `out` and
//     checkpoint.dir free of another run's files: run.json, metrics.jsonl, summary.json, events.jsonl,
//     sample.txt, training.png, model/ and step_<n> checkpoints. Otherwise it is an error naming them and
//     offering --out DIR or --overwrite, which removes exactly those files first (and says so). One
//     exception: --resume auto where run.json names a run of this config restarts that run under its id (a
//     first start killed before its first checkpoint committed: the same command line must work again).
//   - A resume needs a checkpoint of this config (the identity hash; the error lists the fields that
//     differ) and directories that hold no other run; the run keeps the checkpoint's run id. --resume auto
//     considers only the checkpoints of the run that checkpoint.dir's run.json names.
//   - A run that has already finished (the checkpoint to resume is its final step; with --resume auto and no
//     committed checkpoint, its summary.json records all its steps) is complete: nothing is written. When
//     the final checkpoint was lost (corrupted, a failed save), the run continues from the one before.
// Rank 0 looks at the directories and removes files; every rank opens the checkpoint; rank 0's decision
// (run id, complete) is shared with the others.
#pragma once

#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "dist/comm.h"
#include "train/run_identity.h"
#include "train/train_config.h"

namespace zaya::train {

struct RunStart {
  RunIdentity identity;                          // with its run id
  std::unique_ptr<ckpt::Checkpoint> checkpoint;  // the checkpoint to continue from; null: from step 1
  bool complete = false;                         // the run has already finished: nothing to do
};

// `resume`: "" (fresh), "auto" or a step directory (RunOptions::resume); `overwrite`: a fresh start removes
// the previous run's files (an error with a resume). Collective. Throws zaya::Error naming the directory or
// checkpoint, what it holds and what to do.
RunStart plan_run_start(const TrainConfig& c, const std::string& resume, bool overwrite, dist::Comm& comm);

}  // namespace zaya::train
