#include "kernels/vec_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/in_register.h"
#include "kernels/lane_sum.h"
#include "kernels/vec_exp.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
// GCC 12's AVX-512 reduce/cast intrinsics start from _mm512_undefined_*: false "uninitialized" warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace zaya {

using namespace vec_exp;  // the constants and exp_ps (vec_exp.h)

namespace {

[[maybe_unused]] float exp_scalar(float x) {
  if (std::isnan(x)) return x;
  x = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float y = std::fma(p, r * r, r + 1.f);
  return std::ldexp(y, int(n));
}

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define ZAYA_VEC_AVX2 1
// CPUs without AVX-512 (AMD Zen 3): the same arithmetic on 8 lanes, so that every result below has the bits
// of the AVX-512 path (the same polynomial, the same lane chains, the same reduction trees).

// exp_ps on 8 lanes; 2^n applied as two exact halves (n ∈ [-150, 128]: each half is a normal power of two),
// so the result is rounded once, as _mm512_scalef_ps rounds it.
inline __m256 exp_ps8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(kHi), _mm256_max_ps(_mm256_set1_ps(kLo), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  // A NaN x: n is NaN, its conversion the integer indefinite; y is NaN already and stays NaN.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
}

#endif

}  // namespace

float exp_f32(float x) {
#if defined(__AVX512F__)
  return _mm512_cvtss_f32(exp_ps(_mm512_set1_ps(x)));
#elif defined(ZAYA_VEC_AVX2)
  return _mm256_cvtss_f32(exp_ps8(_mm256_set1_ps(x)));
#else
  return exp_scalar(x);
#endif
}

float dot_f32(const float* x, const float* y, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
  s = _mm512_reduce_add_ps(acc);
#elif defined(ZAYA_VEC_AVX2)
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), hi);
  }
  s = lane_sum16(lo, hi);
#endif
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

#if defined(__AVX512F__)
namespace {
// NT dots of dot_f32's AVX-512 form side by side: per dot one 16-lane fma chain, _mm512_reduce_add_ps, the
// tail in order.
template <int NT>
void dots_avx512(float* out, const float* x, const float* ys, int64_t ldy, int64_t n) {
  __m512 acc[NT];
  for (int j = 0; j < NT; j++) acc[j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int j = 0; j < NT; j++) acc[j] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(ys + j * ldy + i), acc[j]);
  }
  for (int j = 0; j < NT; j++) {
    float s = _mm512_reduce_add_ps(acc[j]);
    for (int64_t k = i; k < n; k++) s += x[k] * ys[j * ldy + k];
    out[j] = s;
  }
}
}  // namespace
#endif

void dot_f32_many(float* out, const float* x, const float* ys, int64_t ldy, int64_t m, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 8 <= m; j += 8) dots_avx512<8>(out + j, x, ys + j * ldy, ldy, n);
  if (m - j >= 4) dots_avx512<4>(out + j, x, ys + j * ldy, ldy, n), j += 4;
  if (m - j >= 2) dots_avx512<2>(out + j, x, ys + j * ldy, ldy, n), j += 2;
#endif
  for (; j < m; j++) out[j] = dot_f32(x, ys + j * ldy, n);
}

#if defined(__AVX512F__)
namespace {
// The sums of 16 vectors v[k] at once, each with lane_sum's pairings (l + l+8, then l+4, l+2, l+1; IEEE
// addition commutes, so the same pairs give the same bits): lane 4b + j of the result is the sum of
// v[4j + b]. Each level adds a vector to a shuffled copy of a neighbour, halving the vector count.
inline __m512 lane_sums16(const __m512* v) {
  __m512 c[8], f[4], g[2];
  for (int i = 0; i < 8; i++)  // blocks [v2i:0,1 | v2i+1:0,1] + [v2i:2,3 | v2i+1:2,3]: l + l+8
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int k = 0; k < 4; k++)  // block b of f[k] belongs to v[4k + b]: l + l+4
    f[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xDD));
  for (int m = 0; m < 2; m++)  // per block b: lanes 0,1 of v[8m + b], lanes 2,3 of v[8m + 4 + b]: l + l+2
    g[m] = _mm512_add_ps(_mm512_shuffle_ps(f[2 * m], f[2 * m + 1], 0x44),
                         _mm512_shuffle_ps(f[2 * m], f[2 * m + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88),  // l + l+1
                       _mm512_shuffle_ps(g[0], g[1], 0xDD));
}
}  // namespace
#endif

void dot_f32_grid(float* out, int64_t ldo, const float* xs, int64_t ldx, int64_t nx, const float* ys,
                  int64_t ldy, int64_t ny, int64_t n) {
  int64_t i0 = 0;
#if defined(__AVX512F__)
  if (n % 16 == 0 && ny >= 16) {  // the threshold: vec_math.h
    for (; i0 + 4 <= nx; i0 += 4) {
      const float* x = xs + i0 * ldx;
      int64_t j0 = 0;
      for (; j0 + 4 <= ny; j0 += 4) {
        __m512 acc[16];  // acc[4i + j]: x-row i0 + i with y-row j0 + j
        for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
        const float* y = ys + j0 * ldy;
        for (int64_t c = 0; c < n; c += 16) {  // 8 loads, 16 fmas
          // While the first y-block passes, the next 4 x-rows come into L1 (the same offsets 4 rows on; past
          // the last block that is what follows xs, the next call's rows in the CCA convolution, and a
          // prefetch never faults): they would otherwise arrive from memory one line per step (a batch-16
          // ZAYA1-8B step's convolution, weights evicted by the expert stream: 6.1-7.8 -> 5.5-6.0 ms).
          if (j0 == 0)
            for (int i = 0; i < 4; i++)
              _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(x) +
                                                         uintptr_t((4 + i) * ldx + c) * sizeof(float)),
                           _MM_HINT_T0);
          // The first x-block's pass also fetches the y-rows 8 on (2 blocks, 4 kB at n = 128) into L1: decode
          // attention's keys come from memory (the expert stream evicts them between layers) and the four
          // interleaved rows of a block, 2 kB apart, are not a stream the hardware prefetcher follows well
          // (bench/attention_bench BM_AttentionDecode, cold; the figures, with the value sum's prefetch,
          // above weighted_rows_f32 in attention.cpp).
          if (i0 == 0)
            for (int j = 0; j < 4; j++)
              _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(y) +
                                                         uintptr_t((8 + j) * ldy + c) * sizeof(float)),
                           _MM_HINT_T0);
          __m512 xv[4], yv[4];
          for (int i = 0; i < 4; i++) xv[i] = in_register(_mm512_loadu_ps(x + i * ldx + c));
          for (int j = 0; j < 4; j++) yv[j] = in_register(_mm512_loadu_ps(y + j * ldy + c));
          for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) acc[4 * i + j] = _mm512_fmadd_ps(xv[i], yv[j], acc[4 * i + j]);
        }
        // lane 4j + i = Σ acc[4i + j]: y-row j0 + j's four sums side by side.
        alignas(64) float s[16];
        _mm512_store_ps(s, lane_sums16(acc));
        for (int j = 0; j < 4; j++)
          for (int i = 0; i < 4; i++) out[(j0 + j) * ldo + i0 + i] = s[4 * j + i];
      }
      for (int i = 0; i < 4 && j0 < ny; i++) {  // the last ny % 4 y-rows
        float s[4];
        dot_f32_many(s, x + i * ldx, ys + j0 * ldy, ldy, ny - j0, n);
        for (int64_t j = j0; j < ny; j++) out[j * ldo + i0 + i] = s[j - j0];
      }
    }
  }
#endif
  for (; i0 < nx; i0++)
    for (int64_t j0 = 0; j0 < ny; j0 += 8) {
      float s[8];
      const int64_t m = std::min<int64_t>(8, ny - j0);
      dot_f32_many(s, xs + i0 * ldx, ys + j0 * ldy, ldy, m, n);
      for (int64_t j = 0; j < m; j++) out[(j0 + j) * ldo + i0] = s[j];
    }
}

float row_max(const float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 vm = _mm512_set1_ps(mx);
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  mx = _mm512_reduce_max_ps(vm);
#elif defined(ZAYA_VEC_AVX2)
  __m256 vm = _mm256_set1_ps(mx);
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  const __m128 q = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
  const __m128 h = _mm_max_ps(q, _mm_movehl_ps(q, q));
  mx = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
#endif
  for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

double exp_shift_sum(float* out, const float* x, int64_t n, float shift) {
  int64_t i = 0;
  double sum = 0;
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(shift);
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(m, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs)));
    if (out) _mm512_mask_storeu_ps(out + i, m, e);
    acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    acc1 = _mm512_add_pd(acc1,
                         _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  sum = _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
#elif defined(ZAYA_VEC_AVX2)
  // The AVX-512 path's two 8-lane double accumulators as four of 4 lanes, and its reduction tree.
  const __m256 vs = _mm256_set1_ps(shift);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(), a2 = _mm256_setzero_pd(),
          a3 = _mm256_setzero_pd();
  for (; i < n; i += 16) {
    const __m256i m0 = first_lanes8(n - i), m1 = first_lanes8(n - i - 8);
    const __m256 e0 =
        _mm256_and_ps(_mm256_castsi256_ps(m0), exp_ps8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m0), vs)));
    const __m256 e1 =
        _mm256_and_ps(_mm256_castsi256_ps(m1), exp_ps8(_mm256_sub_ps(_mm256_maskload_ps(x + i + 8, m1), vs)));
    if (out) {
      _mm256_maskstore_ps(out + i, m0, e0);
      _mm256_maskstore_ps(out + i + 8, m1, e1);
    }
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
  }
  const __m256d w = _mm256_add_pd(_mm256_add_pd(a0, a2), _mm256_add_pd(a1, a3));  // l + l+8, then l + l+4
  const __m128d v = _mm_add_pd(_mm256_castpd256_pd128(w), _mm256_extractf128_pd(w, 1));  // l + l+2
  sum = _mm_cvtsd_f64(_mm_add_sd(v, _mm_unpackhi_pd(v, v)));                             // l + l+1
#else
  for (; i < n; i++) {
    const float e = exp_scalar(x[i] - shift);
    if (out) out[i] = e;
    sum += e;
  }
#endif
  return sum;
}

void scale_row(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

}  // namespace zaya
