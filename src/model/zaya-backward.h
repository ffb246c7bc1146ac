// The ZAYA1 backward pass (spec §6): gradients of the mean cross-entropy loss with respect to every
// parameter, from the activations a recording forward kept (ForwardOptions::record, spec §6.14).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/zaya-weights.h"
#include "model/zaya.h"

namespace zaya {

// Parameter gradients, fp32, in the same structure as the weights so an optimizer can pair value and
// gradient by name (named()). q/k/v_cur/v_del (and their biases) are views of one fused `qkv` gradient,
// as in the weights. Tied embeddings: lm_head aliases embed, so the head gradient lands in the embedding.
// balancing_biases are buffers: their slots exist (zeros) but never receive a gradient.
struct ZayaGrads {
  ZayaWeights w;

  // All-zero gradients shaped for `cfg`.
  static ZayaGrads zeros(const ZayaConfig& cfg);
  void zero();
  // A training step's clearing: zero() but for the expert weight gradients (0.9 of mid.json's), which are
  // marked stale instead; the next zaya_backward writes them rather than adding to them (moe_experts_backward
  // with overwrite), and zeroes them when it counts no target. The result is what zero() then the backward
  // would give, without a memory-bound pass over them and without its dW products reading zeros back.
  void zero_except_experts();
  // Zeroes the expert gradients if they are still stale (a step whose micro-batches all counted nothing).
  void settle_experts();
  bool experts_stale = false;  // expert gradients hold old values (zero_except_experts); read nothing then
  // Gradient tensors under the parameters' Hugging Face names (buffers excluded), checkpoint order.
  std::vector<NamedParam> named(const ZayaConfig& cfg);
};

// Adds d(loss)/d(param) into `grads` (zero it first for a fresh gradient) and returns the loss, where
//   loss = (sum of this micro-batch's per-token CE over its counted targets) / count_total.
//   acts: recorded by zaya_forward over input ids [B, S] with a fresh cache (mask as in the forward:
//         padded rows of the normed input get no gradient, padded keys are masked).
//   targets[B, S]: the token each position predicts, -100 = ignored.
//   count_total: counted targets of the whole optimizer step (every micro-batch of a gradient accumulation,
//   every rank of a data-parallel step), so that the summed gradients are exactly those of the mean over the
//   whole step however the tokens are split; 0 = this micro-batch's own count (its mean loss). None counted
//   here: loss 0, no gradient. Throws zaya::Error for targets outside [0, V) or count_total below this
//   micro-batch's count.
// Semantics: tied embeddings get both uses; the pad_token_id row gets no gradient from the lookup (only from
// a tied head); the skip class follows the model's semantics (native zero or legacy passthrough); the top-1
// choice passes no gradient; EDA router states carry gradient across blocks. The [T, V] logits gradient
// is formed one row chunk at a time.
// Recomputation (acts.recompute): before each block's backward the block's forward is re-run from its kept
// input into one reused LayerActivations (zaya_recompute_block), so at most one block's full activations
// live at a time; the gradients are bitwise those of a recording without recomputation. `scratch`: the
// buffers of those re-runs (pass the forward's to reuse them; null = a local one).
// block_done(l), when set, is called on the calling thread right after block l's backward (l = L-1 down to
// 0): from then on this call writes no gradient of block l's parameters ("model.layers.<l>."), so data
// parallelism can start reducing them while the blocks below run (overlap).
double zaya_backward(const ZayaModel& model, const Activations& acts, const int32_t* targets,
                     ZayaGrads& grads, int64_t count_total = 0, ForwardScratch* scratch = nullptr,
                     const std::function<void(int64_t layer)>& block_done = nullptr);

// Counted targets (!= -100) among n.
int64_t count_targets(const int32_t* targets, int64_t n);

}  // namespace zaya
