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

void residual_scale_backward(float* d_o, float* d_r, float* dhb, float* dhs, float* drb, float* drs,
                             const float* dout, const float* o, const float* r, const float* hb,
                             const float* hs, const float* rb, const float* rs, int64_t N, int64_t H,
                             bool accumulate_dr) {
  ZAYA_PROFILE_SCOPE("residual_scale_backward");
  // Parameter sums are reduced in double per column: N can be large and these are single vectors.
  for (int64_t i = 0; i < H; i++) {
    double s_hb = 0, s_hs = 0, s_rb = 0, s_rs = 0;
    for (int64_t n = 0; n < N; n++) {
      const int64_t k = n * H + i;
      const float g = dout[k];
      s_hb += g * hs[i];
      s_hs += g * (o[k] + hb[i]);
      s_rb += g * rs[i];
      s_rs += g * (r[k] + rb[i]);
    }
    dhb[i] += float(s_hb);
    dhs[i] += float(s_hs);
    drb[i] += float(s_rb);
    drs[i] += float(s_rs);
  }
  for (int64_t n = 0; n < N; n++) {
    for (int64_t i = 0; i < H; i++) {
      const int64_t k = n * H + i;
      const float g = dout[k];
      d_r[k] = accumulate_dr ? d_r[k] + g * rs[i] : g * rs[i];
      d_o[k] = g * hs[i];
    }
  }
}

void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  const double inv_sqrt2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
  for (int64_t i = 0; i < n; i++) {
    const double v = x[i];
    const double cdf = 0.5 * (1.0 + std::erf(v * inv_sqrt2));
    const double pdf = inv_sqrt_2pi * std::exp(-0.5 * v * v);
    dx[i] = float(dy[i] * (cdf + v * pdf));
  }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t I) {
  for (int64_t n = 0; n < N; n++) {
    const float* a = gate_up + n * 2 * I;
    const float* b = a + I;
    const float* g = dout + n * I;
    float* da = dgate_up + n * 2 * I;
    float* db = da + I;
    for (int64_t i = 0; i < I; i++) {
      const float sig = 1.0f / (1.0f + std::exp(-a[i]));
      const float silu = a[i] * sig;
      da[i] = g[i] * b[i] * sig * (1.0f + a[i] * (1.0f - sig));
      db[i] = g[i] * silu;
    }
  }
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; n++) {
    const float* yr = y + n * D;
    const float* gr = dy + n * D;
    float* xr = dx + n * D;
    double dot = 0;
    for (int64_t i = 0; i < D; i++) dot += double(gr[i]) * yr[i];
    for (int64_t i = 0; i < D; i++) xr[i] = yr[i] * (gr[i] - float(dot));
  }
}

}  // namespace zaya
