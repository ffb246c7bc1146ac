// The sum of a 16-lane fp32 vector in one fixed order, shared by the kernels whose results must agree bit
// for bit (gemm_rows' batch-invariant bf16 dot form and the decode kernel for bf16 / FP8 weights,
// quant_gemm.h): lanes l and l + 8, then l + 4, l + 2, l + 1 (gemm_small.cpp's lane_sums4 tree, one vector
// at a time: the same additions of the same values, so the same bits).
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

namespace zaya {

// (maskz extracts: GCC 12 warns that the unmasked forms read an undefined value.)
inline float lane_sum(__m512 v) {
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);                                                 // l + l+8
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // l + l+4
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                 // l + l+2
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, _MM_SHUFFLE(1, 1, 1, 1)));       // l + l+1
  return _mm_cvtss_f32(s1);
}

}  // namespace zaya

#endif
