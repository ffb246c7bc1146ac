// One optimizer step of training: forward + backward over the step's micro-batches, global-norm clipping,
// the scheduled learning rate, the optimizer update and the balancing-controller update. The trainer's loop
// (train/trainer.cpp) and the trajectory test against the PyTorch reference (tests/train_traj_test.cpp) both
// run exactly this function; data-parallel training extends it (gradient and count reduction go between the
// backward and the clipping).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/loader.h"
#include "dist/zero1.h"
#include "model/zaya.h"
#include "train/balancer.h"
#include "train/optim_config.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace zaya::train {

struct StepResult {
  double loss = 0;       // mean CE over every counted target (!= -100) of the step's micro-batches
  double grad_norm = 0;  // global gradient norm before clipping (NaN / Inf when a gradient is not finite)
  double lr = 0;         // the scheduled learning rate of this update
  bool clipped = false;  // the gradients were scaled down to optim.grad_clip
  bool finite = true;    // false: non-finite loss or gradient, no update was applied (weights, optimizer
                         // and balancer state unchanged)
  const char* rejected = nullptr;  // the caller's `reject` refused the finite step (its reason): no update
  int64_t targets = 0;             // counted targets of the step
  std::vector<int64_t> counts;  // [L, E+1] tokens routed to each expert (index E = skip), all micro-batches
                                // (data-parallel: of every rank)
  // Wall seconds of the step's stages (zaya bench train reports them): zeroing the gradients, the forwards,
  // the backwards (data parallel: with the overlapped reduction; the wait for its end counts in `clip`),
  // the gradient norm, the optimizer update (with the fused clip factor) and the refresh of the bf16 compute
  // weights (data parallel: with the parameter broadcast before it).
  struct Seconds {
    double zero_grads = 0, forward = 0, backward = 0, clip = 0, optimizer = 0, refresh = 0;
  } seconds;
};

// Runs update `step` (1-based; the schedule sees step - 1) on `tm` from `micro_batches` (gradient
// accumulation: the gradient is that of the mean over every counted target of all of them).
//   micro_batches: each [rows, seq_len] input ids and targets (-100 = ignored); ids must lie in
//   [0, vocab_size) (zaya::Error naming the micro-batch otherwise); at least one micro-batch.
//   optim_cfg: grad_clip, lr and schedule are read here; `optim` and `balancer` were built from it.
// On a finite step: optimizer update of the master weights, balancer update of the balancing biases from
// the step's counts, compute weights refreshed. Gradients are left in tm.grads as the backward summed them
// (unclipped: the optimizer applies the clip factor as it reads them).
// recompute: activation recomputation (ForwardOptions::recompute; bitwise the same step, less memory).
// reject: asked with the (global) loss of a finite step before its update; a non-null reason (a loss spike)
// skips the update exactly as a non-finite step does.
// Data parallel (dp set, one call on every rank of dp->comm()): micro_batches are this rank's slices of the
// step's global micro-batches (DataLoader::next_batch(B, S, rank, world)); the target count, loss, expert
// counts and gradient norm are global (the same on every rank); `optim` holds this rank's shards
// (dp->plan().owned(rank)) and updates only them, then every shard is broadcast from its owner, so all ranks
// end the step with the same weights and balancer state. Only owned gradient entries are left reduced
// in tm.grads. Without dp (or in a world of one) the step is exactly the single-process one.
StepResult train_step(TrainModel& tm, Optimizer& optim, BalanceController& balancer,
                      const std::vector<data::Batch>& micro_batches, const OptimConfig& optim_cfg,
                      int64_t step, ForwardScratch& scratch, bool recompute = false,
                      dist::Zero1* dp = nullptr, const std::function<const char*(double loss)>& reject = {});

}  // namespace zaya::train
