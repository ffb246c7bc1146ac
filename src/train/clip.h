// Global-norm gradient clipping over every parameter's gradient (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <vector>

#include "train/param_groups.h"

namespace zaya::train {

struct ClipResult {
  double norm = 0;     // the global L2 norm before clipping (NaN or Inf when a gradient is not finite)
  bool finite = true;  // false when any gradient is NaN or ±Inf: nothing was scaled, skip this update
  float scale = 1.0f;  // the factor applied to every gradient (1 when no clipping happened)
};

// Computes ‖g‖ over all gradients (fp64 accumulation) and, when max_norm > 0 and ‖g‖ > max_norm, scales
// every gradient by max_norm / (‖g‖ + 1e-6) (torch's formula). Non-finite gradients are reported and left
// as they are.
ClipResult clip_grad_norm(const std::vector<ParamRef>& params, float max_norm);

// The norm and the factor of clip_grad_norm without scaling anything: the training step passes r.scale to
// the optimizer, which applies it as it reads each gradient (one pass over the gradients fewer).
ClipResult grad_norm_clip(const std::vector<ParamRef>& params, float max_norm);

}  // namespace zaya::train
