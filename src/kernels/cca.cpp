#include "kernels/cca.h"

#include <cmath>
#include <vector>

namespace zaya {

void cca_conv_forward(float* out, float* mid, const float* frames, const float* w0, const float* b0,
                      const float* w1, const float* b1, int64_t S, const CcaDims& dm) {
  const int64_t C = dm.C(), d = dm.d, t0 = dm.t0, t1 = dm.t1, P = dm.P();
  const int64_t n_mid = S + t1 - 1;
  // Depthwise: m_σ[c] = b0[c] + Σ_j w0[c,j] · u_{σ-t0+1+j}[c]; frame τ lives at row τ + P of `frames`,
  // and mid row σ + (t1-1). Row σ=-(t1-1) reads frames rows 0 … t0-1.
  for (int64_t s = 0; s < n_mid; s++) {
    float* m = mid + s * C;
    for (int64_t c = 0; c < C; c++) m[c] = b0[c];
    for (int64_t j = 0; j < t0; j++) {
      const float* u = frames + (s + j) * C;
      for (int64_t c = 0; c < C; c++) m[c] += w0[c * t0 + j] * u[c];
    }
  }
  (void)P;
  // Grouped: c_t[o] = b1[o] + Σ_j Σ_c' W1[o,c',j] · m_{t-t1+1+j}[g(o)·d + c']; mid row of m_{t-t1+1+j} = t +
  // j.
  const int64_t groups = dm.Hq + dm.Hk;
#pragma omp parallel for collapse(2) schedule(static) if (S * C * d > 65536)
  for (int64_t t = 0; t < S; t++) {
    for (int64_t g = 0; g < groups; g++) {
      for (int64_t ol = 0; ol < d; ol++) {
        int64_t o = g * d + ol;
        float acc = b1[o];
        const float* w = w1 + o * d * t1;
        for (int64_t j = 0; j < t1; j++) {
          const float* m = mid + (t + j) * C + g * d;
          float part = 0.f;
#pragma omp simd reduction(+ : part)
          for (int64_t c = 0; c < d; c++) part += w[c * t1 + j] * m[c];
          acc += part;
        }
        out[t * C + o] = acc;
      }
    }
  }
}

void rope_inv_freq(float* inv_freq, int64_t r, double theta) {
  // Reference: 1 / (theta ** (arange(0, r, 2, int64).float() / r)) in fp32.
  for (int64_t i = 0; i < r / 2; i++) {
    float expo = float(2 * i) / float(r);
    inv_freq[i] = 1.0f / std::pow(float(theta), expo);
  }
}

void rope_apply(float* x, int64_t pos, int64_t r, const float* inv_freq) {
  const int64_t half = r / 2;
  for (int64_t i = 0; i < half; i++) {
    float phi = float(pos) * inv_freq[i];
    float c = std::cos(phi), s = std::sin(phi);
    float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

void cca_qk_forward(float* conv, const float* raw, const float* temp, const int64_t* positions, int64_t S,
                    const CcaDims& dm, int64_t rotary_dim, double theta) {
  const int64_t Hq = dm.Hq, Hk = dm.Hk, d = dm.d, A = dm.A(), C = dm.C(), G = Hq / Hk;
  const float sqrt_d = std::sqrt(float(d));
  const float eps_q = 1.1920928955078125e-07f;  // fp32 machine epsilon: the reference's clamp (spec §5.5d)
  std::vector<float> inv_freq(rotary_dim / 2 + 1);
  rope_inv_freq(inv_freq.data(), rotary_dim, theta);
#pragma omp parallel for schedule(static) if (S * C > 65536)
  for (int64_t t = 0; t < S; t++) {
    float* row = conv + t * C;
    const float* u = raw + t * C;
    std::vector<float> qr(Hq * d);
    // (c) Qr[h] = ½(Q0[h] + K0[κ(h)]); Kr[j] = mean of Qr over the group of j.
    for (int64_t h = 0; h < Hq; h++) {
      const float* q0 = u + h * d;
      const float* k0 = u + A + (h / G) * d;
      for (int64_t i = 0; i < d; i++) qr[h * d + i] = 0.5f * (q0[i] + k0[i]);
    }
    for (int64_t h = 0; h < Hq; h++) {
      for (int64_t i = 0; i < d; i++) row[h * d + i] += qr[h * d + i];
    }
    for (int64_t j = 0; j < Hk; j++) {
      float* k = row + A + j * d;
      for (int64_t i = 0; i < d; i++) {
        float s = 0.f;
        for (int64_t g = 0; g < G; g++) s += qr[(j * G + g) * d + i];
        k[i] += s / float(G);
      }
    }
    // (d) QK norm (keys also scaled by the linear temperature), (e) RoPE at the absolute position.
    for (int64_t h = 0; h < Hq + Hk; h++) {
      float* v = row + h * d;
      float ss = 0.f;
      for (int64_t i = 0; i < d; i++) ss += v[i] * v[i];
      float n = std::sqrt(ss);
      float scale = sqrt_d / std::max(n, eps_q);
      if (h >= Hq) scale *= temp[h - Hq];
      for (int64_t i = 0; i < d; i++) v[i] *= scale;
      rope_apply(v, positions[t], rotary_dim, inv_freq.data());
    }
  }
}

}  // namespace zaya
