#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/profile.h"
#include "core/threads.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace zaya {

void residual_scale_forward(float* out, const float* o, const float* r, const float* hb, const float* hs,
                            const float* rb, const float* rs, int64_t N, int64_t H) {
  ZAYA_PROFILE_SCOPE("residual_scale");
  parallel_for_static(N, N * H > 65536, [&](int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < H; i++) {
      int64_t k = n * H + i;
      out[k] = (o[k] + hb[i]) * hs[i] + (r[k] + rb[i]) * rs[i];
    }
  });
}

// Φ(x) = ½(1 + erf(x/√2)) through glibc's vector erff (libmvec, ≤ 4 ulp, 16 lanes) where the build targets
// AVX-512; the scalar erff otherwise. Element-wise, so any split over threads gives the same values.
#if defined(__AVX512F__)
extern "C" __m512 _ZGVeN16v_erff(__m512);  // glibc ≥ 2.35 libmvec: erff on 16 lanes
extern "C" __m512 _ZGVeN16v_expf(__m512);  // glibc ≥ 2.22 libmvec: expf on 16 lanes
#endif

void gelu_forward(float* x, int64_t n) {
  ZAYA_PROFILE_SCOPE("gelu");
  const float inv_sqrt2 = 0.70710678118654752440f;
  constexpr int64_t kChunk = 4096;  // values per task: a few µs, so threads pay off from ~2 chunks
  parallel_for_static((n + kChunk - 1) / kChunk, n > 2 * kChunk, [&](int64_t chunk) {
    const int64_t c0 = chunk * kChunk, c1 = std::min(n, c0 + kChunk);
    int64_t i = c0;
#if defined(__AVX512F__)
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), s = _mm512_set1_ps(inv_sqrt2);
    for (; i < c1; i += 16) {
      const __mmask16 m = c1 - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (c1 - i)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
      const __m512 e = _ZGVeN16v_erff(_mm512_mul_ps(v, s));
      _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
    }
#endif
    for (; i < c1; i++) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * inv_sqrt2));
  });
}

void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t I) {
  ZAYA_PROFILE_SCOPE("swiglu");
  // Threaded from a few rows on: a batch-16 decode step of ZAYA1-8B (16 x 2048, scalar expf) took 0.1 ms a
  // layer on one thread.
  // exp on 16 lanes (libmvec) where the build targets AVX-512: the scalar expf made SwiGLU ~2% of a training
  // step (small.json: 1.4 ms for 2048 x 256).
  parallel_for_static(N, N * I > 8192, [&](int64_t n) {
    const float* a = gate_up + n * 2 * I;
    const float* b = a + I;
    float* y = out + n * I;
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (; i < I; i += 16) {
      const __mmask16 m = I - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (I - i)) - 1);
      const __m512 va = _mm512_maskz_loadu_ps(m, a + i), vb = _mm512_maskz_loadu_ps(m, b + i);
      const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(zero, va));
      _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_div_ps(va, _mm512_add_ps(one, e)), vb));
    }
#endif
    for (; i < I; i++) y[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
  });
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
      int64_t i = 0;
#if defined(__AVX512F__)
      // 16 columns a step, the sums in fp64 on two 8-lane halves (GCC left the loop below scalar: its
      // float -> double mix found no vector type; 2.7 ms a mid.json call). d_o is written after dout is read.
      for (; i + 16 <= H; i += 16) {
        const __m512 gv = _mm512_loadu_ps(g + i);
        const __m512 oh = _mm512_add_ps(_mm512_loadu_ps(on + i), _mm512_loadu_ps(hb + i));
        const __m512 rr = _mm512_add_ps(_mm512_loadu_ps(rn + i), _mm512_loadu_ps(rb + i));
        for (int half = 0; half < 2; half++) {
          const __m512d gd =
              _mm512_cvtps_pd(half ? _mm512_extractf32x8_ps(gv, 1) : _mm512_castps512_ps256(gv));
          const __m512d od =
              _mm512_cvtps_pd(half ? _mm512_extractf32x8_ps(oh, 1) : _mm512_castps512_ps256(oh));
          const __m512d rd =
              _mm512_cvtps_pd(half ? _mm512_extractf32x8_ps(rr, 1) : _mm512_castps512_ps256(rr));
          double* sg = s_g + i + 8 * half;
          double* sh = s_hs + i + 8 * half;
          double* sr = s_rs + i + 8 * half;
          _mm512_storeu_pd(sg, _mm512_add_pd(_mm512_loadu_pd(sg), gd));
          _mm512_storeu_pd(sh, _mm512_fmadd_pd(gd, od, _mm512_loadu_pd(sh)));
          _mm512_storeu_pd(sr, _mm512_fmadd_pd(gd, rd, _mm512_loadu_pd(sr)));
        }
        const __m512 rsv = _mm512_loadu_ps(rs + i);
        _mm512_storeu_ps(dr + i, accumulate_dr ? _mm512_fmadd_ps(gv, rsv, _mm512_loadu_ps(dr + i))
                                               : _mm512_mul_ps(gv, rsv));
        _mm512_storeu_ps(dov + i, _mm512_mul_ps(gv, _mm512_loadu_ps(hs + i)));
      }
#endif
      for (; i < H; i++) {
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
  ZAYA_PROFILE_SCOPE("gelu_backward");
  const float inv_sqrt2 = 0.70710678118654752440f, inv_sqrt_2pi = 0.39894228040143267794f;
  constexpr int64_t kChunk = 4096;
  parallel_for_static((n + kChunk - 1) / kChunk, n > 2 * kChunk, [&](int64_t chunk) {
    const int64_t c0 = chunk * kChunk, c1 = std::min(n, c0 + kChunk);
    int64_t i = c0;
#if defined(__AVX512F__)
    const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f), one = _mm512_set1_ps(1.0f);
    const __m512 s = _mm512_set1_ps(inv_sqrt2), p = _mm512_set1_ps(inv_sqrt_2pi);
    for (; i < c1; i += 16) {
      const __mmask16 m = c1 - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (c1 - i)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
      const __m512 cdf = _mm512_mul_ps(half, _mm512_add_ps(one, _ZGVeN16v_erff(_mm512_mul_ps(v, s))));
      const __m512 pdf = _mm512_mul_ps(p, _ZGVeN16v_expf(_mm512_mul_ps(mhalf, _mm512_mul_ps(v, v))));
      const __m512 g = _mm512_maskz_loadu_ps(m, dy + i);
      _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(g, _mm512_fmadd_ps(v, pdf, cdf)));
    }
#endif
    for (; i < c1; i++) {
      const float v = x[i];
      const float cdf = 0.5f * (1.0f + std::erf(v * inv_sqrt2));
      const float pdf = inv_sqrt_2pi * std::exp(-0.5f * v * v);
      dx[i] = dy[i] * (cdf + v * pdf);
    }
  });
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t I) {
  ZAYA_PROFILE_SCOPE("swiglu_backward");
#pragma omp parallel for schedule(static) if (N * I > 65536)
  for (int64_t n = 0; n < N; n++) {
    const float* a = gate_up + n * 2 * I;
    const float* b = a + I;
    const float* g = dout + n * I;
    float* da = dgate_up + n * 2 * I;
    float* db = da + I;
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (; i < I; i += 16) {
      const __mmask16 m = I - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (I - i)) - 1);
      const __m512 va = _mm512_maskz_loadu_ps(m, a + i), vb = _mm512_maskz_loadu_ps(m, b + i);
      const __m512 vg = _mm512_maskz_loadu_ps(m, g + i);
      const __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, _ZGVeN16v_expf(_mm512_sub_ps(zero, va))));
      const __m512 silu = _mm512_mul_ps(va, sig);
      const __m512 grow = _mm512_fmadd_ps(va, _mm512_sub_ps(one, sig), one);  // 1 + a(1 − σ)
      _mm512_mask_storeu_ps(da + i, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(vg, vb), sig), grow));
      _mm512_mask_storeu_ps(db + i, m, _mm512_mul_ps(vg, silu));
    }
#endif
    for (; i < I; i++) {
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
