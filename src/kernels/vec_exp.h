// The vector exp of vec_math.h's softmax rows, inline for kernels that keep their values in registers (the
// fused attention of attention.cpp): Cephes expf, within 2 ulp of fp32 on [-87, 88] (tests/kernels_test.cpp
// checks exp_f32, which runs exp_ps).
#pragma once

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace zaya::vec_exp {

// Cephes expf: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split into an exact high part and a low part so n·ln2_hi
// is exact for |n| < 2^9), exp(r) = 1 + r + r²·P(r), then scaled by 2^n.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.428606765330187045e-06f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kLo = -104.f, kHi = 88.8f;  // exp(−104) is 0 in fp32 after scaling; exp(88.8) overflows

#if defined(__AVX512F__)
// exp of 16 lanes: inputs below −104 give 0, +inf stays +inf, NaN stays NaN.
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

}  // namespace zaya::vec_exp
