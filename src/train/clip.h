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

}  // namespace zaya::train
