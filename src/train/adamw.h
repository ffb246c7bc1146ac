// The AdamW update (torch.optim.AdamW semantics): decoupled weight decay, bias-corrected moments, eps
// added outside the square root.
#pragma once

#include <cstdint>

#include "train/optim_config.h"

namespace zaya::train {

// One AdamW step on n fp32 elements, in place:
//   m ← β1·m + (1−β1)·g          v ← β2·v + (1−β2)·g²          p ← p·(1 − lr·wd)
//   p ← p − lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
// `step` is t, the 1-based number of this update (1 for the first).
// grad_scale: g = grad[i] · grad_scale (the clipping factor, applied here as the gradient is read rather than
// in a pass of its own over every gradient: bitwise the same update; 1 = none).
void adamw_update(float* value, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, float lr,
                  float weight_decay, const AdamWConfig& cfg, int64_t step, float grad_scale = 1.0f);

}  // namespace zaya::train
