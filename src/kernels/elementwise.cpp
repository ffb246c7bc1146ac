#include "kernels/elementwise.h"

#include <cmath>

#include "core/profile.h"

namespace zaya {

void residual_scale_forward(float* out, const float* o, const float* r, const float* hb, const float* hs,
                            const float* rb, const float* rs, int64_t N, int64_t H) {
  ZAYA_PROFILE_SCOPE("residual_scale");
#pragma omp parallel for schedule(static) if (N * H > 65536)
  for (int64_t n = 0; n < N; n++) {
#pragma omp simd
    for (int64_t i = 0; i < H; i++) {
      int64_t k = n * H + i;
      out[k] = (o[k] + hb[i]) * hs[i] + (r[k] + rb[i]) * rs[i];
    }
  }
}

void gelu_forward(float* x, int64_t n) {
  ZAYA_PROFILE_SCOPE("gelu");
  const float inv_sqrt2 = 0.70710678118654752440f;
  for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * inv_sqrt2));
}

void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t I) {
  ZAYA_PROFILE_SCOPE("swiglu");
#pragma omp parallel for schedule(static) if (N * I > 65536)
  for (int64_t n = 0; n < N; n++) {
    const float* a = gate_up + n * 2 * I;
    const float* b = a + I;
    float* y = out + n * I;
#pragma omp simd
    for (int64_t i = 0; i < I; i++) y[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
  }
}

void softmax_forward(float* x, int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; n++) {
    float* row = x + n * D;
    float mx = row[0];
    for (int64_t i = 1; i < D; i++) mx = row[i] > mx ? row[i] : mx;
    float sum = 0.f;
    for (int64_t i = 0; i < D; i++) {
      row[i] = std::exp(row[i] - mx);
      sum += row[i];
    }
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < D; i++) row[i] *= inv;
  }
}

}  // namespace zaya
