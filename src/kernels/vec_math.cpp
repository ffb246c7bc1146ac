#include "kernels/vec_math.h"

#include <cmath>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12's AVX-512 reduce/cast intrinsics start from _mm512_undefined_*: false "uninitialized" warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace zaya {

namespace {

// Cephes expf: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split into an exact high part and a low part so n·ln2_hi
// is exact for |n| < 2^9), exp(r) = 1 + r + r²·P(r), then scaled by 2^n.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.428606765330187045e-06f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kLo = -104.f, kHi = 88.8f;  // exp(−104) is 0 in fp32 after scaling; exp(88.8) overflows

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

#if defined(__AVX512F__)
inline __m512 exp_ps(__m512 x) {
  // max/min with x second: a NaN x is returned as is (the second operand wins on NaN).
  x = _mm512_min_ps(_mm512_set1_ps(kHi), _mm512_max_ps(_mm512_set1_ps(kLo), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  const __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(y, n);
}
#endif

}  // namespace

float exp_f32(float x) {
#if defined(__AVX512F__)
  return _mm512_cvtss_f32(exp_ps(_mm512_set1_ps(x)));
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
#endif
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

float row_max(const float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 vm = _mm512_set1_ps(mx);
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  mx = _mm512_reduce_max_ps(vm);
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
