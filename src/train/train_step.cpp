#include "train/train_step.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/zaya-backward.h"
#include "model/zaya-cache.h"
#include "train/clip.h"
#include "train/schedule.h"

namespace zaya::train {

StepResult train_step(TrainModel& tm, Optimizer& optim, BalanceController& balancer,
                      const std::vector<data::Batch>& micro_batches, const OptimConfig& optim_cfg,
                      int64_t step, ForwardScratch& scratch, bool recompute) {
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

  tm.grads.zero();
  ForwardOptions fo;
  fo.all_logits = false;  // the backward recomputes the logits chunk by chunk
  fo.recompute = recompute;
  ForwardResult res;
  for (const data::Batch& b : micro_batches) {
    Activations acts;
    fo.record = &acts;
    ZayaCache cache(mc, b.rows);
    zaya_forward(tm.compute, cache, b.input_ids.data(), nullptr, b.rows, b.seq_len, fo, res, scratch);
    r.loss += zaya_backward(tm.compute, acts, b.targets.data(), tm.grads, r.targets, &scratch);
    for (int64_t l = 0; l < L; l++)
      for (int32_t ch : acts.layers[l].choice) r.counts[size_t(l * (E + 1) + ch)]++;
  }

  const ClipResult clip = clip_grad_norm(tm.params, optim_cfg.grad_clip);
  r.grad_norm = clip.norm;
  r.clipped = clip.finite && optim_cfg.grad_clip > 0 && clip.norm > optim_cfg.grad_clip;
  r.lr = lr_at(optim_cfg.schedule, optim_cfg.lr, step - 1);
  r.finite = clip.finite && std::isfinite(r.loss);
  if (!r.finite) return r;
  optim.step(tm.params, float(r.lr));
  std::vector<float*> biases;
  for (auto& layer : tm.master.w.layers) biases.push_back(layer.balancing_biases.f32());
  balancer.update(r.counts.data(), biases);
  tm.refresh_compute();
  return r;
}

}  // namespace zaya::train
