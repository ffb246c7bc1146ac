#include "kernels/cca.h"

#include <cmath>
#include <vector>

#include "core/profile.h"
#include "kernels/gemm.h"

namespace zaya {

void cca_conv_forward(float* out, float* mid, const float* frames, const float* w0, const float* b0,
                      const float* w1, const float* b1, int64_t S, const CcaDims& dm) {
  ZAYA_PROFILE_SCOPE("cca_conv");
  const int64_t C = dm.C(), d = dm.d, t0 = dm.t0, t1 = dm.t1;
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
  // Grouped: c_t[o] = b1[o] + Σ_j Σ_c' W1[o,c',j] · m_{t-t1+1+j}[g(o)·d + c']; mid row of m_{t-t1+1+j} = t +
  // j. Per group g and tap j this is a GEMM: out[:, g·d:(g+1)·d] += mid[j : j+S, g·d:(g+1)·d] · W1[g·d:…, :,
  // j]ᵀ, with the tap-major weights w1t[j][o][c'] re-laid from [o][c'][j].
  const int64_t groups = dm.Hq + dm.Hk;
  if (S < 16) {  // decode and short chunks: direct loops (a GEMM per group would be all call overhead)
    for (int64_t t = 0; t < S; t++) {
      for (int64_t o = 0; o < C; o++) {
        const float* w = w1 + o * d * t1;
        const int64_t g = o / d;
        float acc = b1[o];
        for (int64_t j = 0; j < t1; j++) {
          const float* m = mid + (t + j) * C + g * d;
          for (int64_t c = 0; c < d; c++) acc += w[c * t1 + j] * m[c];
        }
        out[t * C + o] = acc;
      }
    }
    return;
  }
  std::vector<float> w1t(t1 * C * d);  // shared by the threads below (a thread_local would not be)
  for (int64_t o = 0; o < C; o++)
    for (int64_t c = 0; c < d; c++)
      for (int64_t j = 0; j < t1; j++) w1t[(j * C + o) * d + c] = w1[(o * d + c) * t1 + j];
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < groups; g++) {
    for (int64_t j = 0; j < t1; j++) {
      gemm(S, d, d, 1.f, mat(mid + j * C + g * d, C),
           mat(w1t.data() + (j * C + g * d) * d, d, /*trans=*/true), j == 0 ? 0.f : 1.f, out + g * d, C);
    }
  }
  for (int64_t t = 0; t < S; t++)
    for (int64_t o = 0; o < C; o++) out[t * C + o] += b1[o];
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
  ZAYA_PROFILE_SCOPE("cca_qk_rope");
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
