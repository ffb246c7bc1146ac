// The sum of a 16-lane fp32 vector in one fixed order, shared by the kernels whose results must agree bit
// for bit (gemm_rows' batch-invariant bf16 dot form and the decode kernel for bf16 / FP8 weights,
// quant_gemm.h; vec_math's and gemm_small's AVX2 paths): lanes l and l + 8, then l + 4, l + 2, l + 1
// (gemm_small.cpp's lane_sums4 tree, one vector at a time: the same additions of the same values, so the
// same bits). The AVX2 forms hold 16 lanes as two 8-lane vectors; lane masks for their tails.
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>

namespace zaya {

// The last three levels on 8 lanes: l + l+4, l + l+2, l + l+1 (lanes of the AVX2 kernels' accumulators).
inline float lane_sum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l + l+4
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // l + l+2
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, _MM_SHUFFLE(1, 1, 1, 1)));     // l + l+1
  return _mm_cvtss_f32(s1);
}

// 16 lanes held as two 8-lane vectors (lanes 0..7 and 8..15, the AVX2 form of one 16-lane chain): the whole
// tree, the same bits as lane_sum of the 16-lane vector.
inline float lane_sum16(__m256 lo, __m256 hi) {
  return lane_sum8(_mm256_add_ps(lo, hi));  // l + l+8, then the rest
}

// A mask of lanes 0 .. n-1 (n clamped to [0, 8]) for _mm256_maskload_ps / _mm256_maskstore_ps: the vector
// tails of the AVX2 paths.
inline __m256i first_lanes8(int64_t n) {
  const int k = n < 0 ? 0 : n > 8 ? 8 : int(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace zaya

#endif

#if defined(__AVX512F__)

namespace zaya {

// (maskz extracts: GCC 12 warns that the unmasked forms read an undefined value.)
inline float lane_sum(__m512 v) {
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1));
  return lane_sum16(lo, hi);
}

}  // namespace zaya

#endif
