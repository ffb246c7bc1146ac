#include "kernels/norm.h"

#include <cmath>

#include "core/profile.h"

namespace zaya {

void rmsnorm_forward(float* out, float* rstd, const float* in, const float* g, int64_t N, int64_t D,
                     float eps) {
  ZAYA_PROFILE_SCOPE("rmsnorm");
#pragma omp parallel for schedule(static) if (N * D > 16384)
  for (int64_t n = 0; n < N; n++) {
    const float* x = in + n * D;
    float* y = out + n * D;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < D; i++) ss += x[i] * x[i];
    float r = 1.0f / std::sqrt(ss / float(D) + eps);
    if (rstd) rstd[n] = r;
#pragma omp simd
    for (int64_t i = 0; i < D; i++) y[i] = g[i] * (x[i] * r);
  }
}

void rmsnorm_backward(float* din, float* dg, const float* dout, const float* in, const float* g,
                      const float* rstd, int64_t N, int64_t D, bool accumulate) {
  ZAYA_PROFILE_SCOPE("rmsnorm_backward");
  // ḡx = ν·(q − x̂·mean(q ⊙ x̂)) with q = ḡy ⊙ g, x̂ = x·ν;  ḡg = Σ ḡy ⊙ x̂. dg is reduced serially (it is
  // small).
  for (int64_t n = 0; n < N; n++) {
    const float* x = in + n * D;
    const float* dy = dout + n * D;
    float* dx = din + n * D;
    float r = rstd[n];
    float dot = 0.f;
    for (int64_t i = 0; i < D; i++) dot += dy[i] * g[i] * x[i] * r;
    float mean = dot / float(D);
    for (int64_t i = 0; i < D; i++) {
      float xh = x[i] * r;
      float v = r * (dy[i] * g[i] - xh * mean);
      dx[i] = accumulate ? dx[i] + v : v;
      dg[i] += dy[i] * xh;
    }
  }
}

}  // namespace zaya
