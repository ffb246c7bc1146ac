#include "train/clip.h"

#include <cmath>

namespace zaya::train {

ClipResult clip_grad_norm(const std::vector<ParamRef>& params, float max_norm) {
  double sum_sq = 0;
  for (const ParamRef& p : params) {
    const int64_t n = shape_numel(p.shape);
    const float* g = p.grad;
#pragma omp parallel for reduction(+ : sum_sq) schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; i++) sum_sq += double(g[i]) * double(g[i]);
  }
  ClipResult r;
  r.norm = std::sqrt(sum_sq);  // NaN stays NaN; Inf (or an fp64 overflow, impossible from fp32) stays Inf
  r.finite = std::isfinite(r.norm);
  if (!r.finite || max_norm <= 0 || r.norm <= max_norm) return r;
  r.scale = float(double(max_norm) / (r.norm + 1e-6));
  for (const ParamRef& p : params) {
    const int64_t n = shape_numel(p.shape);
    float* g = p.grad;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; i++) g[i] *= r.scale;
  }
  return r;
}

}  // namespace zaya::train
