// zaya train: trains a ZAYA1 model from TRAIN.json (docs/train-config.md); data parallel under mpirun / srun
// (docs/distributed.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "ckpt/checkpoint.h"
#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "dist/comm.h"
#include "train/trainer.h"

namespace {

int cmd_train(int argc, char** argv) {
  CLI::App app{
      "Train a ZAYA1 model (config in TRAIN.json; see docs/train-config.md; mpirun/srun for data "
      "parallelism, docs/distributed.md)"};
  std::string config, out;
  int64_t steps = 0;
  double max_minutes = -1;
  double comm_timeout = 300;
  zaya::train::RunOptions run;
  app.add_option("--config", config, "TRAIN.json")->required();
  app.add_option("--steps", steps, "override 'steps'");
  app.add_option("--max-minutes", max_minutes, "override 'max_minutes'");
  app.add_option("--out", out,
                 "override 'out': the run's directory (checkpoints go to DIR/checkpoints unless "
                 "checkpoint.dir is set). A directory belongs to one run: a fresh start into one that holds "
                 "another run is refused");
  auto* overwrite =
      app.add_flag("--overwrite", run.overwrite,
                   "a fresh start into a directory of another run removes that run's files "
                   "(run.json, metrics, summary, model/, checkpoints) first instead of refusing");
  auto* resume = app.add_option(
      "--resume", run.resume,
      "continue from a training checkpoint: 'auto' (the newest one under checkpoint.dir whose "
      "checksums verify; broken ones are reported and skipped; no committed one = start fresh) or "
      "a step directory; any number of ranks loads it (resharding). A run that has already "
      "finished is reported complete and left as it is");
  overwrite->excludes(resume);
  app.add_option("--rank-log", run.rank_log_dir, "data parallel: every rank also logs to DIR/rank<r>.log");
  app.add_option("--comm-timeout", comm_timeout,
                 "data parallel: seconds to wait for the other ranks before aborting the job with a message "
                 "naming the rank that died or hangs")
      ->check(CLI::PositiveNumber);
  app.add_flag(
      "--overlap", run.overlap,
      "data parallel: start each block's gradient reductions (nonblocking) during the backward instead "
      "of blocking reductions after it (slower on one machine without an MPI progress thread)");
  ZAYA_PARSE(app, argc, argv);
  // A named checkpoint is checked before anything is built: a typo, an HF model directory or a checkpoints
  // root is named at once, not after the model's set-up.
  if (!run.resume.empty() && run.resume != "auto")
    zaya::ckpt::check_checkpoint_dir(run.resume, "--resume (auto or a step directory)");
  // MPI starts here when a launcher started this process (a world of one otherwise).
  zaya::dist::Comm& comm = zaya::dist::Comm::world();
  comm.set_timeout(comm_timeout);
  try {
    zaya::train::TrainConfig c = zaya::train::load_train_config(config);
    if (steps > 0) {
      c.steps = steps;
      c.optim.schedule.total_steps = steps;
    }
    if (max_minutes >= 0) c.max_minutes = max_minutes;
    if (!out.empty()) {
      // The checkpoints follow the run's directory unless TRAIN.json puts them elsewhere.
      if (c.ckpt_dir == c.out_dir + "/checkpoints") c.ckpt_dir = out + "/checkpoints";
      c.out_dir = out;
    }
    const zaya::train::TrainSummary sum = zaya::train::run_training(c, run);
    if (!sum.stopped.empty()) {
      if (comm.is_root()) std::fprintf(stderr, "zaya train: stopped: %s\n", sum.stopped.c_str());
      zaya::dist::Comm::finalize();
      return 1;
    }
  } catch (const std::exception& e) {
    // One rank's error (a bad file, a bad token id) ends every rank now instead of leaving them waiting.
    if (comm.active()) zaya::dist::Comm::abort(zaya::str_cat("zaya train: error: ", e.what()), 1);
    throw;
  }
  zaya::dist::Comm::finalize();
  return 0;
}

zaya::app::Register reg("train", "train a ZAYA1 model (Muon + AdamW, balancing controller, bf16 GEMMs)",
                        cmd_train);

}  // namespace
