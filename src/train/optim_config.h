// Every optimisation hyper-parameter of a training run (spec §9.2, §9.3) in one struct, parsed from the
// "optim" object of a training config. The defaults are the documented ZAYA1 recipe where it is known and
// common practice where the spec says [uncertain]:
//
//   {"lr": 3e-4, "weight_decay": 0.1, "grad_clip": 1.0,
//    "adamw": {"betas": [0.9, 0.95], "eps": 1e-8},
//    "muon": {"momentum": 0.95, "nesterov": true, "ns_steps": 5, "ns_coefficients": [3.4445, -4.775, 2.0315],
//             "ns_dtype": "bf16" | "fp32",
//             "rms_match": "moonlight", "rms_match_scale": 0.2},
//    "groups": {"<group>": {"optimizer": "muon" | "adamw", "lr_scale": 1.0, "weight_decay": 0.1}, ...},
//    "schedule": {"kind": "constant" | "cosine" | "wsd", "warmup_steps": 0, "total_steps": 0,
//                 "min_lr_fraction": 0.1, "decay_fraction": 0.2, "decay_shape": "linear" | "1-sqrt"},
//    "balancer": {"rule": "adam" | "sign", "lr": 1e-3, "betas": [0.9, 0.99], "eps": 1e-8,
//                 "sign_rate": 1e-3, "skip_target": null}}
//
// Every key is optional; unknown keys are errors (a typo must not silently train with a default).
//
// Parameter groups (the ZAYA1 split, see train/param_groups.h for which tensor goes where):
//   matrix       Muon   hidden 2-D matrices: q/k/v_cur/v_del/o, router down/fc1/fc2/out_proj
//   expert       Muon   expert matrices, each expert's [2I,H] / [H,I] slice its own Muon matrix
//   embedding    AdamW  embed_tokens, lm_head
//   conv         AdamW  CCA convolution weights (3-D)
//   norm         AdamW  RMSNorm weights
//   bias         AdamW  linear/conv biases, residual-scale biases
//   scale        AdamW  residual scales, hidden-state scales, router EDA scales
//   temperature  AdamW  qk_norm.temp
// Weight decay default: the global `weight_decay` on every tensor with two or more dimensions (matrix,
// expert, embedding, conv), none on 1-D tensors (norm, bias, scale, temperature), which set a level or an
// offset rather than a feature direction, so decaying them towards 0 only fights the loss.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace zaya::train {

enum class OptimKind { AdamW, Muon };
const char* optim_kind_name(OptimKind k);  // "adamw", "muon"

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f;
  float eps = 1e-8f;  // added to sqrt(v̂), outside the square root (torch.optim.AdamW)
};

// How Muon's orthogonalised update (all singular values ≈ 1, RMS ≈ 1/sqrt(max(rows, cols))) is rescaled.
enum class RmsMatch {
  None,         // scale 1
  Moonlight,    // rms_match_scale * sqrt(max(rows, cols)): update RMS ≈ rms_match_scale, like AdamW's
  KellerJordan  // sqrt(max(1, rows / cols))
};

struct MuonConfig {
  float momentum = 0.95f;  // 0 disables momentum (the ZAYA1 RL setting)
  bool nesterov = true;
  int ns_steps = 5;
  std::array<float, 3> ns_coefficients = {3.4445f, -4.7750f, 2.0315f};  // quintic (a, b, c)
  // The Newton–Schulz products' operand dtype: bf16 (the Muon reference's and the usual practice; fp32
  // accumulation, an fp32 iterate) or fp32 (exact against the fp64 reference to ~1e-6). "ns_dtype".
  DType ns_dtype = DType::BF16;
  RmsMatch rms_match = RmsMatch::Moonlight;
  float rms_match_scale = 0.2f;
};

// The named parameter groups of the ZAYA1 split, in a fixed order.
enum class GroupId { Matrix, Expert, Embedding, Conv, Norm, Bias, Scale, Temperature };
constexpr int kNumGroups = 8;
const char* group_name(GroupId g);  // "matrix", "expert", ...

struct GroupConfig {
  OptimKind kind = OptimKind::AdamW;
  float lr_scale = 1.0f;              // multiplies the scheduled lr
  std::optional<float> weight_decay;  // unset: the global weight_decay for >= 2-D groups, 0 for 1-D groups
};

enum class ScheduleKind { Constant, Cosine, Wsd };
enum class DecayShape { Linear, OneMinusSqrt };

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::Constant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;       // cosine / wsd: the step at which the decay reaches min_lr_fraction
  float min_lr_fraction = 0.1f;  // final lr = min_lr_fraction * lr
  float decay_fraction = 0.2f;   // wsd: the last decay_fraction of total_steps decay
  DecayShape decay_shape = DecayShape::Linear;  // wsd decay shape
};

enum class BalanceRule { Adam, Sign, Rprop };

// The auxiliary-loss-free balancing controller (spec §9.3); its hyper-parameters are [uncertain] there.
struct BalancerConfig {
  BalanceRule rule = BalanceRule::Adam;
  float lr = 1e-3f;  // Adam rule step size
  float beta1 = 0.9f, beta2 = 0.99f, eps = 1e-8f;
  float sign_rate = 1e-3f;  // sign rule: bias -= sign_rate * sign(error)
  // rprop rule: bias -= step · sign(error) with a step per entry that grows ×rprop_up while the error keeps
  // its sign and shrinks ×rprop_down when it flips, within [rprop_min, rprop_max], from rprop_init. It
  // finds the scale of the routing margins by itself (see balancer.h).
  float rprop_init = 1e-4f, rprop_min = 1e-6f, rprop_max = 1e-2f, rprop_up = 1.2f, rprop_down = 0.5f;
  // The skip class (index E) is fixed when unset (spec: its bias appears to stay at -1). When set, the
  // skip bias is driven so that the fraction of tokens skipped approaches skip_target.
  std::optional<float> skip_target;
};

struct OptimConfig {
  float lr = 3e-4f;  // peak learning rate (the schedule scales it)
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // global-norm clip threshold; 0 disables clipping
  AdamWConfig adamw;
  MuonConfig muon;
  std::array<GroupConfig, kNumGroups> groups = default_groups();
  ScheduleConfig schedule;
  BalancerConfig balancer;

  static std::array<GroupConfig, kNumGroups> default_groups();
  // The weight decay group `g` gets: its override, else the global one for >= 2-D groups, else 0.
  float group_weight_decay(GroupId g) const;
};

// Parses an "optim" JSON object (every key optional, see above). `what` names the source in errors (the file)
// and `path` the object's JSON path in it ("optim" in TRAIN.json); errors name the field by its whole path:
// "run.json: field 'optim.muon.ns_steps': expected an integer, got a string", "run.json: field
// 'optim.learning_rate' is not a known field (did you mean 'optim.lr'?)".
OptimConfig parse_optim_config(const nlohmann::json& j, const std::string& what,
                               const std::string& path = "");

}  // namespace zaya::train
