#include "train/adamw.h"

#include <cmath>

#include "core/error.h"

namespace zaya::train {

void adamw_update(float* value, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, float lr,
                  float weight_decay, const AdamWConfig& cfg, int64_t step, float grad_scale) {
  ZAYA_ASSERT(step >= 1, "AdamW steps are counted from 1 (bias correction divides by 1 - beta^t)");
  // Scalars in double, as torch computes them in Python, then rounded once.
  const double bias_correction1 = 1.0 - std::pow(double(cfg.beta1), double(step));
  const double bias_correction2 = 1.0 - std::pow(double(cfg.beta2), double(step));
  const float step_size = float(double(lr) / bias_correction1);
  const float bias_correction2_sqrt = float(std::sqrt(bias_correction2));
  const float decay = 1.0f - lr * weight_decay;
  const float b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps;
  // g·grad_scale is what a separate clipping pass would have stored; its two uses are products, so no fma
  // contraction can fold it differently.
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; i++) {
    float g = grad[i] * grad_scale;
    float m = exp_avg[i] * b1 + (1.0f - b1) * g;
    float v = exp_avg_sq[i] * b2 + (1.0f - b2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    float denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    value[i] = value[i] * decay - step_size * (m / denom);
  }
}

}  // namespace zaya::train
