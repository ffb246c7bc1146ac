// The training loop of `zaya train` (single process): fp32 master weights, gradients and optimizer state;
// GEMMs in fp32 or bf16; Muon + AdamW with the ZAYA1 split; the balancing-bias controller after every step;
// gradient accumulation, global-norm clipping, warmup + cosine / WSD schedules; validation loss; metrics
// as JSONL; at the end an HF checkpoint, a sample generation and a loss / load-entropy plot.
#pragma once

#include <string>

#include "train/train_config.h"

namespace zaya::train {

struct TrainSummary {
  int64_t steps = 0;
  double final_train_loss = 0, final_val_loss = 0;
  double seconds = 0;
  int64_t skipped_steps = 0;  // non-finite gradients
};

TrainSummary run_training(const TrainConfig& cfg);

}  // namespace zaya::train
