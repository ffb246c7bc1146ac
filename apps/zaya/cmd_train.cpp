// zaya train: trains a ZAYA1 model from TRAIN.json (docs/train-config.md).
#include <CLI/CLI.hpp>

#include "command.h"
#include "train/trainer.h"

namespace {

int cmd_train(int argc, char** argv) {
  CLI::App app{"Train a ZAYA1 model (config in TRAIN.json; see docs/train-config.md)"};
  std::string config;
  int64_t steps = 0;
  double max_minutes = -1;
  app.add_option("--config", config, "TRAIN.json")->required();
  app.add_option("--steps", steps, "override 'steps'");
  app.add_option("--max-minutes", max_minutes, "override 'max_minutes'");
  CLI11_PARSE(app, argc, argv);
  zaya::train::TrainConfig c = zaya::train::load_train_config(config);
  if (steps > 0) {
    c.steps = steps;
    c.optim.schedule.total_steps = steps;
  }
  if (max_minutes >= 0) c.max_minutes = max_minutes;
  zaya::train::run_training(c);
  return 0;
}

zaya::app::Register reg("train", "train a ZAYA1 model (Muon + AdamW, balancing controller, bf16 GEMMs)",
                        cmd_train);

}  // namespace
