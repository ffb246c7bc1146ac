#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  // One pass over rows, parallel over fixed blocks of rows: each block sums its rows per column in double,
  // then the blocks are added in block order, so the parameter gradients do not depend on the thread count.
  constexpr int64_t kRows = 32;
  const int64_t n_blocks = (N + kRows - 1) / kRows;
  // [block][Σg | Σg·(o+hb) | Σg·(r+rb)][H]; Σg·hs and Σg·rs follow from Σg.
  std::vector<double> partial(n_blocks * 3 * H);
#pragma omp parallel for schedule(static) if (N * H > 65536)
  for (int64_t blk = 0; blk < n_blocks; blk++) {
    double* s_g = partial.data() + blk * 3 * H;
    double* s_hs = s_g + H;
    double* s_rs = s_hs + H;
    std::fill(s_g, s_g + 3 * H, 0.0);
    for (int64_t n = blk * kRows; n < std::min(N, (blk + 1) * kRows); n++) {
      const float* g = dout + n * H;
      const float* on = o + n * H;
      const float* rn = r + n * H;
      float* dr = d_r + n * H;
      float* dov = d_o + n * H;
      for (int64_t i = 0; i < H; i++) {
        const float gi = g[i];  // read before d_o (which may alias dout) is written
        s_g[i] += gi;
        s_hs[i] += double(gi) * (on[i] + hb[i]);
        s_rs[i] += double(gi) * (rn[i] + rb[i]);
        dr[i] = accumulate_dr ? dr[i] + gi * rs[i] : gi * rs[i];
        dov[i] = gi * hs[i];
      }
    }
  }
#pragma omp parallel for schedule(static) if (N * H > 65536)
  for (int64_t i = 0; i < H; i++) {
    double g_sum = 0, hs_sum = 0, rs_sum = 0;
    for (int64_t blk = 0; blk < n_blocks; blk++) {
      const double* part = partial.data() + blk * 3 * H;
      g_sum += part[i];
      hs_sum += part[H + i];
      rs_sum += part[2 * H + i];
    }
    dhb[i] += float(g_sum * hs[i]);  // Σ g·hs = hs·Σ g
    dhs[i] += float(hs_sum);
    drb[i] += float(g_sum * rs[i]);  // Σ g·rs = rs·Σ g
    drs[i] += float(rs_sum);
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
