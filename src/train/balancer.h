// The auxiliary-loss-free balancing controller (spec §9.3): after each optimizer step it moves every MoE
// layer's balancing_biases [E+1] (which affect the expert choice only, spec §5.6) so that experts the
// global batch over-used get a lower bias.
//
// Load error of layer l, expert e < E:   err_e = f_e − 1/E,   f_e = c_e / Σ_{e'<E} c_e'
// The denominator counts expert assignments only, not skip-routed tokens: f is then a distribution over the
// E experts whose uniform target is exactly 1/E, and how many tokens skip (the MoD decision) does not shift
// every expert's error the same way. A layer whose tokens all skipped gets no update.
//
// Rules:  adam  m ← β1·m + (1−β1)·err,  v ← β2·v + (1−β2)·err²,  bias −= lr · m̂ / (sqrt(v̂) + eps)
//         sign  bias −= sign_rate · sign(err)                                    (DeepSeek-V3)
//         rprop bias −= δ · sign(err),  δ ← min(δ·up, δ_max) while sign(err) repeats, max(δ·down, δ_min) when
//               it flips (δ per entry, from rprop_init; an entry whose error is 0 keeps δ and does not move)
//
// Why rprop: the biases are added to softmax probabilities (spec §5.6), and what matters is their size
// against the routing margins (top − runner-up score of a token). A freshly initialised router is nearly
// uniform: its margins are ~1e-4, so any fixed step the Adam or sign rules take (≥ 1e-3 to catch up with a
// router that learns to prefer an expert) moves every token at once and the load flips between experts
// from step to step (measured on the main job: one balancer step of 1e-3 with the model frozen sends all
// tokens of every layer to one expert). rprop's step shrinks while the load oscillates and grows while an
// imbalance persists, so it settles at the margin scale of each layer as the router sharpens.
// The skip entry (index E) stays fixed by default; with skip_target set its error is
// c_E / Σ_{all classes} c − skip_target and it follows the same rule.
//
// State (checkpoints): "balancer.step" I64 [1], "balancer.exp_avg" and "balancer.exp_avg_sq" F32 [L, E+1]
// (adam), "balancer.step_size" and "balancer.prev_sign" F32 [L, E+1] (rprop; step_size 0 = not started).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "train/optim_config.h"

namespace zaya::train {

class BalanceController {
 public:
  BalanceController(int64_t num_layers, int64_t num_experts, const BalancerConfig& cfg);

  // counts: [L, E+1] int64, tokens of the whole (global) batch routed to each class (index E = skip),
  // summed over every micro-batch of the step. biases[l]: layer l's balancing_biases, E+1 floats.
  void update(const int64_t* counts, const std::vector<float*>& biases);

  int64_t steps_taken() const { return steps_; }
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  void load_state(const std::vector<std::pair<std::string, Tensor>>& saved, const std::string& what);

 private:
  int64_t layers_, experts_;
  BalancerConfig cfg_;
  Tensor exp_avg_, exp_avg_sq_;   // [L, E+1] adam moments
  Tensor step_size_, prev_sign_;  // [L, E+1] rprop step sizes and the previous error signs
  Tensor step_tensor_;            // I64 [1]
  int64_t steps_ = 0;
};

// Router-load entropy per layer (natural log) of the distribution over the E experts (skip excluded):
// H_l = −Σ_e p_e ln p_e, p_e = c_e / Σ_{e'<E} c_e'. ln E is perfectly balanced; 0 when a layer routed
// nothing to experts. counts: [L, E+1] int64.
std::vector<double> router_load_entropy(const int64_t* counts, int64_t num_layers, int64_t num_experts);

}  // namespace zaya::train
