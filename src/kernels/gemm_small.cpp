#include "kernels/gemm_small.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/lane_sum.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace zaya {

namespace {

#if defined(__AVX512F__)

constexpr int kRows = 4;  // C rows per block (A values broadcast)
constexpr int kVecs = 4;  // 16-float vectors per block row: 64 columns
constexpr int kLanes = 16;

inline __mmask16 lanes_mask(int64_t lanes) {
  return lanes >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(lanes, 0)) - 1u);
}

// C[m0 : m0+rows, n0 : n0+cols] for cols <= NV * 16; rows past M reuse row M-1 (computed, never stored).
template <int NV>
void block(int64_t m0, int64_t rows, int64_t n0, int64_t cols, int64_t M, int64_t K, float alpha,
           const MatRef& A, const float* b, int64_t ldb, float beta, float* C, int64_t ldc) {
  const auto* a = static_cast<const float*>(A.data);
  int64_t a_off[kRows];  // offset of A[m, 0]
  int64_t a_step;        // offset step from A[m, k] to A[m, k+1]
  for (int r = 0; r < kRows; r++) {
    const int64_t m = std::min(m0 + r, M - 1);
    a_off[r] = A.trans ? m : m * A.ld;
  }
  a_step = A.trans ? A.ld : 1;
  __mmask16 mask[NV];
  for (int j = 0; j < NV; j++) mask[j] = lanes_mask(cols - j * kLanes);

  __m512 acc[kRows][NV];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; r++)
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) acc[r][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    const float* brow = b + k * ldb + n0;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) bv[j] = _mm512_maskz_loadu_ps(mask[j], brow + j * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      const __m512 av = _mm512_set1_ps(a[a_off[r] + k * a_step]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; j++) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < rows; r++) {
    float* c = C + (m0 + r) * ldc + n0;
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
      __m512 out = _mm512_mul_ps(va, acc[r][j]);
      if (beta != 0.0f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[j], c + j * kLanes), out);
      _mm512_mask_storeu_ps(c + j * kLanes, mask[j], out);
    }
  }
}

// The lane sums of four accumulators in one fixed tree each: s[l] += s[l+8], then s[l] += s[l+4], s[l+2],
// s[l+1]; returns {sum(v0), sum(v1), sum(v2), sum(v3)}. Two vectors share each shuffle (maskz forms: GCC 12
// warns that the unmasked ones read an undefined value).
inline __m128 lane_sums4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  const __mmask16 all = 0xFFFF;
  // Quarters (128 bits) q0..q3: [v0.q0 v0.q1 v1.q0 v1.q1] + [v0.q2 v0.q3 v1.q2 v1.q3]: lanes l + l+8.
  const __m512 t01 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all, v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_maskz_shuffle_f32x4(all, v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t23 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all, v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_maskz_shuffle_f32x4(all, v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
  // l + l+4: quarter k of u holds the four partial sums of v_k.
  const __m512 u = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all, t01, t23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_maskz_shuffle_f32x4(all, t01, t23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 w = _mm512_add_ps(u, _mm512_maskz_permute_ps(all, u, _MM_SHUFFLE(1, 0, 3, 2)));  // l + l+2
  const __m512 z = _mm512_add_ps(w, _mm512_maskz_permute_ps(all, w, _MM_SHUFFLE(2, 3, 0, 1)));  // l + l+1
  // Lane 0 of each quarter.
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_maskz_extractf32x4_ps(0xF, _mm512_maskz_permutexvar_ps(all, pick, z), 0);
}

// Dot form for a transposed B (stored [N, K], the Linear layout x·Wᵀ): C[m0 : m0+4, n0 : n0+4] from rows of
// A (`a`, [M, K] with row stride lda) and rows of B. Lane l of an element's accumulator sums k ≡ l (mod 16)
// in increasing k; lane_sum adds the lanes. Rows and columns past M, N reuse the last one (never stored).
void dot_block(int64_t m0, int64_t n0, int64_t M, int64_t N, int64_t K, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* C, int64_t ldc) {
  const float* ar[kRows];
  const float* br[kRows];
  for (int r = 0; r < kRows; r++) ar[r] = a + std::min(m0 + r, M - 1) * lda;
  for (int j = 0; j < kRows; j++) br[j] = b + std::min(n0 + j, N - 1) * ldb;
  __m512 acc[kRows][kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; r++)
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) acc[r][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += kLanes) {
    const __mmask16 mk = lanes_mask(K - k);
    __m512 bv[kRows];
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) bv[j] = _mm512_maskz_loadu_ps(mk, br[j] + k);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      const __m512 av = _mm512_maskz_loadu_ps(mk, ar[r] + k);
#pragma GCC unroll 4
      for (int j = 0; j < kRows; j++) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  const __mmask8 cols = __mmask8((1u << std::min<int64_t>(kRows, N - n0)) - 1u);
  const __m128 va = _mm_set1_ps(alpha), vb = _mm_set1_ps(beta);
  for (int r = 0; r < kRows && m0 + r < M; r++) {
    float* c = C + (m0 + r) * ldc + n0;
    __m128 out = _mm_mul_ps(va, lane_sums4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    if (beta != 0.0f) out = _mm_fmadd_ps(vb, _mm_maskz_loadu_ps(cols, c), out);
    _mm_mask_storeu_ps(c, cols, out);
  }
}

#else

#if defined(__AVX2__) && defined(__FMA__)
#define ZAYA_SMALL_AVX2 1
// CPUs without AVX-512 (AMD Zen 3): the same chains on 8-float vectors, the same bits as the AVX-512 blocks
// (and as the scalar loops below, which they replace there).

// Dot form, one row of A against 4 rows of B (columns n0 .. n0+3; past N the last one, never stored): 16
// lane chains per element as two 8-float accumulators, k ≡ l (mod 16) in increasing k.
void dot_row4(int64_t m, int64_t n0, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* C, int64_t ldc) {
  const float* ar = a + m * lda;
  const float* br[4];
  for (int j = 0; j < 4; j++) br[j] = b + std::min(n0 + j, N - 1) * ldb;
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256 a0 = _mm256_loadu_ps(ar + k), a1 = _mm256_loadu_ps(ar + k + 8);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      lo[j] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(br[j] + k), lo[j]);
      hi[j] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(br[j] + k + 8), hi[j]);
    }
  }
  if (k < K) {  // the tail: lanes past K stay as they are (zeros meet zeros)
    const __m256i m0 = first_lanes8(K - k), m1 = first_lanes8(K - k - 8);
    const __m256 a0 = _mm256_maskload_ps(ar + k, m0), a1 = _mm256_maskload_ps(ar + k + 8, m1);
    for (int j = 0; j < 4; j++) {
      lo[j] = _mm256_fmadd_ps(a0, _mm256_maskload_ps(br[j] + k, m0), lo[j]);
      hi[j] = _mm256_fmadd_ps(a1, _mm256_maskload_ps(br[j] + k + 8, m1), hi[j]);
    }
  }
  for (int j = 0; j < 4 && n0 + j < N; j++) {
    float& c = C[m * ldc + n0 + j];
    const float t = alpha * lane_sum16(lo[j], hi[j]);
    c = beta == 0.0f ? t : std::fma(beta, c, t);
  }
}

// Broadcast form (B stored [K, N]), rows m0 .. m0+rows-1 (rows <= 4) and columns n0 .. n0+cols-1 (cols <=
// 16): one fma chain over k in order per element, 8 columns a vector.
void bcast_block(int64_t m0, int64_t rows, int64_t n0, int64_t cols, int64_t K, float alpha, const MatRef& A,
                 const float* b, int64_t ldb, float beta, float* C, int64_t ldc) {
  const auto* a = static_cast<const float*>(A.data);
  const int64_t a_step = A.trans ? A.ld : 1;
  int64_t a_off[4];
  for (int r = 0; r < 4; r++) {
    const int64_t m = m0 + std::min<int64_t>(r, rows - 1);
    a_off[r] = A.trans ? m : m * A.ld;
  }
  const __m256i mask0 = first_lanes8(cols), mask1 = first_lanes8(cols - 8);
  __m256 acc[4][2];
  for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    const float* brow = b + k * ldb + n0;
    const __m256 b0 = _mm256_maskload_ps(brow, mask0), b1 = _mm256_maskload_ps(brow + 8, mask1);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
      const __m256 av = _mm256_set1_ps(a[a_off[r] + k * a_step]);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  for (int r = 0; r < rows; r++) {
    float* c = C + (m0 + r) * ldc + n0;
    for (int h = 0; h < 2; h++) {
      const __m256i mask = h ? mask1 : mask0;
      __m256 out = _mm256_mul_ps(va, acc[r][h]);
      if (beta != 0.0f) out = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + 8 * h, mask), out);
      _mm256_maskstore_ps(c + 8 * h, mask, out);
    }
  }
}
#endif

// The same arithmetic as dot_block for one element, without AVX-512 (identical bits, up to the sign of an
// exact zero sum).
[[maybe_unused]] float dot_lanes(const float* a, const float* b, int64_t K) {
  float s[16] = {};
  for (int64_t k = 0; k < K; k++) s[k % 16] = std::fma(a[k], b[k], s[k % 16]);
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) s[l] += s[l + w];
  return s[0];
}

#endif  // __AVX512F__

}  // namespace

void gemm_small_f32(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B,
                    float beta, float* C, int64_t ldc) {
  thread_local std::vector<float> packed;
  if (B.trans) {
    // Dot form: rows of A along k (a transposed A is copied to [M, K]) against the stored rows of B.
    const auto* a = static_cast<const float*>(A.data);
    int64_t lda = A.ld;
    if (A.trans) {
      packed.resize(size_t(M * K));
      for (int64_t k = 0; k < K; k++)
        for (int64_t m = 0; m < M; m++) packed[size_t(m * K + k)] = a[k * A.ld + m];
      a = packed.data(), lda = K;
    }
    const auto* b = static_cast<const float*>(B.data);
#if defined(__AVX512F__)
    for (int64_t m0 = 0; m0 < M; m0 += kRows)
      for (int64_t n0 = 0; n0 < N; n0 += kRows)
        dot_block(m0, n0, M, N, K, alpha, a, lda, b, B.ld, beta, C, ldc);
#elif defined(ZAYA_SMALL_AVX2)
    for (int64_t m = 0; m < M; m++)
      for (int64_t n0 = 0; n0 < N; n0 += 4) dot_row4(m, n0, N, K, alpha, a, lda, b, B.ld, beta, C, ldc);
#else
    for (int64_t m = 0; m < M; m++) {
      for (int64_t n = 0; n < N; n++) {
        float& c = C[m * ldc + n];
        const float t = alpha * dot_lanes(a + m * lda, b + n * B.ld, K);
        c = beta == 0.0f ? t : std::fma(beta, c, t);
      }
    }
#endif
    return;
  }
  // Broadcast form: B stored [K, N]; each C element is one fma chain over k in order.
  const float* b = static_cast<const float*>(B.data);
  const int64_t ldb = B.ld;
#if defined(__AVX512F__)
  for (int64_t m0 = 0; m0 < M; m0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, M - m0);
    for (int64_t n0 = 0; n0 < N; n0 += kVecs * kLanes) {
      const int64_t cols = std::min<int64_t>(kVecs * kLanes, N - n0);
      switch ((cols + kLanes - 1) / kLanes) {
        case 1:
          block<1>(m0, rows, n0, cols, M, K, alpha, A, b, ldb, beta, C, ldc);
          break;
        case 2:
          block<2>(m0, rows, n0, cols, M, K, alpha, A, b, ldb, beta, C, ldc);
          break;
        case 3:
          block<3>(m0, rows, n0, cols, M, K, alpha, A, b, ldb, beta, C, ldc);
          break;
        default:
          block<4>(m0, rows, n0, cols, M, K, alpha, A, b, ldb, beta, C, ldc);
          break;
      }
    }
  }
#elif defined(ZAYA_SMALL_AVX2)
  for (int64_t m0 = 0; m0 < M; m0 += 4)
    for (int64_t n0 = 0; n0 < N; n0 += 16)
      bcast_block(m0, std::min<int64_t>(4, M - m0), n0, std::min<int64_t>(16, N - n0), K, alpha, A, b, ldb,
                  beta, C, ldc);
#else
  const auto* a = static_cast<const float*>(A.data);
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++)
        acc = std::fma(A.trans ? a[k * A.ld + m] : a[m * A.ld + k], b[k * ldb + n], acc);
      float& c = C[m * ldc + n];
      c = beta == 0.0f ? alpha * acc : std::fma(beta, c, alpha * acc);
    }
  }
#endif
}

}  // namespace zaya
