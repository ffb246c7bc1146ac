#include "train/train_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "model/zaya-backward.h"
#include "model/zaya-cache.h"
#include "train/clip.h"
#include "train/schedule.h"

namespace zaya::train {

StepResult train_step(TrainModel& tm, Optimizer& optim, BalanceController& balancer,
                      const std::vector<data::Batch>& micro_batches, const OptimConfig& optim_cfg,
                      int64_t step, ForwardScratch& scratch, bool recompute, dist::Zero1* dp,
                      const std::function<const char*(double loss)>& reject) {
  ZAYA_CHECK(!micro_batches.empty(), "train step ", step, ": no micro-batch");
  ZAYA_CHECK(step >= 1, "train step ", step, ": steps are counted from 1");
  const ZayaConfig& mc = tm.master.cfg;
  const int64_t L = mc.num_hidden_layers, E = mc.num_experts;
  StepResult r;
  r.counts.assign(size_t(L * (E + 1)), 0);

  // Every micro-batch is checked and counted first: the loss normaliser is the step's whole count of
  // targets, so that the accumulated gradient is exactly that of the mean over every token of the step.
  for (size_t m = 0; m < micro_batches.size(); m++) {
    const data::Batch& b = micro_batches[m];
    const size_t n = size_t(b.rows * b.seq_len);
    ZAYA_CHECK(b.rows >= 1 && b.seq_len >= 1 && b.input_ids.size() == n && b.targets.size() == n,
               "train step ", step, ": micro-batch ", m, " is ", b.rows, " x ", b.seq_len, " with ",
               b.input_ids.size(), " ids and ", b.targets.size(), " targets");
    for (int32_t id : b.input_ids)
      ZAYA_CHECK(id >= 0 && id < mc.vocab_size, "train step ", step, ": micro-batch ", m, ": token id ", id,
                 " does not fit the model's vocabulary of ", mc.vocab_size);
    r.targets += count_targets(b.targets.data(), int64_t(n));
  }
  if (dp && !dp->comm().active()) dp = nullptr;  // a world of one: the single-process step
  dist::Comm* comm = dp ? &dp->comm() : nullptr;
  // Seconds this rank waits in the step's small collectives (counts, loss, heartbeats).
  auto small_comm = [&](auto&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    dp->stats().small_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (comm) {
    // The normaliser of every rank's backward is the whole step's count (exact: integers).
    small_comm([&] {
      comm->heartbeat(str_cat("the start of step ", step));
      comm->allreduce_sum(&r.targets, 1, "target count");
    });
  }

  using clock = std::chrono::steady_clock;
  auto lap = clock::now();
  auto stage_done = [&lap](double& seconds) {
    const auto now = clock::now();
    seconds += std::chrono::duration<double>(now - lap).count();
    lap = now;
  };
  tm.grads.zero_except_experts();  // the first backward writes the expert gradients
  stage_done(r.seconds.zero_grads);
  ForwardOptions fo;
  fo.all_logits = false;  // the backward recomputes the logits chunk by chunk
  fo.recompute = recompute;
  ForwardResult res;
  for (size_t m = 0; m < micro_batches.size(); m++) {
    const data::Batch& b = micro_batches[m];
    Activations& acts = scratch.train_acts;
    fo.record = &acts;
    ZayaCache cache(mc, b.rows);
    zaya_forward(tm.compute, cache, b.input_ids.data(), nullptr, b.rows, b.seq_len, fo, res, scratch);
    stage_done(r.seconds.forward);
    // The last micro-batch finishes each block's gradients: data parallelism starts reducing them then.
    std::function<void(int64_t)> block_done;
    if (dp && m + 1 == micro_batches.size()) block_done = [dp](int64_t layer) { dp->block_done(layer); };
    r.loss += zaya_backward(tm.compute, acts, b.targets.data(), tm.grads, r.targets, &scratch, block_done);
    for (int64_t l = 0; l < L; l++)
      for (int32_t ch : acts.layers[l].choice) r.counts[size_t(l * (E + 1) + ch)]++;
    stage_done(r.seconds.backward);
  }

  ClipResult clip;
  if (dp) {
    // Names a rank that hangs in its backward; then owners get their summed gradients.
    small_comm([&] { comm->heartbeat(str_cat("the end of step ", step, "'s backward")); });
    dp->finish_reduce();
    small_comm([&] {
      r.loss = comm->sum_in_rank_order(r.loss, "loss");
      comm->allreduce_sum(r.counts.data(), int64_t(r.counts.size()), "expert counts");
    });
    // torch's clip_grad_norm_ formula on the global norm; each owner's optimizer applies it to its shards.
    clip.norm = std::sqrt(dp->global_grad_sq());
    clip.finite = std::isfinite(clip.norm);
    if (clip.finite && optim_cfg.grad_clip > 0 && clip.norm > optim_cfg.grad_clip)
      clip.scale = float(double(optim_cfg.grad_clip) / (clip.norm + 1e-6));
  } else {
    clip = grad_norm_clip(tm.params, optim_cfg.grad_clip);
  }
  stage_done(r.seconds.clip);
  r.grad_norm = clip.norm;
  r.clipped = clip.finite && optim_cfg.grad_clip > 0 && clip.norm > optim_cfg.grad_clip;
  r.lr = lr_at(optim_cfg.schedule, optim_cfg.lr, step - 1);
  r.finite = clip.finite && std::isfinite(r.loss);
  if (!r.finite) return r;  // every rank sees the same norm and loss: all skip together
  if (reject && (r.rejected = reject(r.loss))) return r;
  // The clip factor goes with the update (one pass over the gradients fewer).
  optim.step(tm.params, float(r.lr), clip.scale);
  stage_done(r.seconds.optimizer);
  if (dp) {
    small_comm([&] { comm->heartbeat(str_cat("the parameter broadcast of step ", step)); });
    dp->broadcast_params();
  }
  std::vector<float*> biases;
  for (auto& layer : tm.master.w.layers) biases.push_back(layer.balancing_biases.f32());
  balancer.update(r.counts.data(), biases);
  // A pass of its own: written inside the AdamW loop, the bf16 copy made the update 1.3-1.5x slower (a
  // fifth output stream; bench/optim_bench BM_AdamW), more than this pass costs.
  tm.refresh_compute();
  stage_done(r.seconds.refresh);
  return r;
}

}  // namespace zaya::train
