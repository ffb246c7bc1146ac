#include "kernels/gemm_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "kernels/gemm_small.h"
#include "kernels/lane_sum.h"

namespace zaya {

namespace {

// Tiles of C handed to the threads: a tile's B panel (kTileCols rows of B, K long) stays in L2 while the
// tile's rows pass over it four at a time.
constexpr int64_t kTileRows = 64;
constexpr int64_t kTileCols = 64;
constexpr int kRows = 4;                      // C rows and columns per register block (dot form)
constexpr int64_t kPrefetchRows = 2 * kRows;  // B rows ahead that a block prefetches

// Packed copies of the operands (per calling thread; filled before the parallel region).
thread_local std::vector<float> t_a32, t_b32;
thread_local std::vector<uint16_t> t_a16, t_b16;

// Element (r, c) of op(X) stored as F32 or BF16, as float.
inline float value(const MatRef& X, int64_t r, int64_t c) {
  const int64_t i = X.trans ? c * X.ld + r : r * X.ld + c;
  if (X.dtype == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(X.data)[i]);
  return static_cast<const float*>(X.data)[i];
}

// op(X)[rows, cols] packed row-major (ld = cols) as bf16 (an fp32 operand rounded to nearest even).
const uint16_t* pack_bf16(const MatRef& X, int64_t rows, int64_t cols, std::vector<uint16_t>& buf) {
  buf.resize(size_t(std::max<int64_t>(rows * cols, 1)));
  if (!X.trans) {
    for (int64_t r = 0; r < rows; r++) {
      if (X.dtype == DType::BF16)
        std::memcpy(buf.data() + r * cols, static_cast<const uint16_t*>(X.data) + r * X.ld,
                    size_t(cols) * sizeof(uint16_t));
      else
        convert_f32_to_bf16(buf.data() + r * cols, static_cast<const float*>(X.data) + r * X.ld, cols);
    }
  } else {
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) buf[size_t(r * cols + c)] = f32_to_bf16(value(X, r, c));
  }
  return buf.data();
}

// op(X)[rows, cols] packed row-major as fp32; `round` rounds every value to bf16 (the bf16 products).
const float* pack_f32(const MatRef& X, int64_t rows, int64_t cols, bool round, std::vector<float>& buf) {
  buf.resize(size_t(std::max<int64_t>(rows * cols, 1)));
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      const float v = value(X, r, c);
      buf[size_t(r * cols + c)] = round ? bf16_to_f32(f32_to_bf16(v)) : v;
    }
  }
  return buf.data();
}

// Writes row r of a register block: c[0 : cols] = alpha * s (+ beta * c).
inline void store(float* c, const float* s, int64_t cols, float alpha, float beta) {
  for (int64_t j = 0; j < cols; j++) {
    const float t = alpha * s[j];
    c[j] = beta == 0.0f ? t : std::fma(beta, c[j], t);
  }
}

#if defined(__AVX512F__)

constexpr int kLanes = 16;

inline __mmask16 mask16(int64_t lanes) {
  return lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(lanes, 0)) - 1u);
}

// Dot-form register block, fp32: C[m0 : m0+R, n0 : n0+4] from R rows of A (a, row stride lda, packed
// [M, K]) and rows n0.. of B ([N, K], row stride ldb); columns past N reuse row N-1 of B (never stored).
template <int R>
void dot_block_f32(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n0, int64_t N, int64_t K,
                   float alpha, float beta, float* c, int64_t ldc) {
  const float* br[kRows];
  for (int j = 0; j < kRows; j++) br[j] = b + std::min(n0 + j, N - 1) * ldb;
  __m512 acc[R][kRows];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) acc[r][j] = _mm512_setzero_ps();
  // One loop, the mask computed per step (all lanes but at the tail).
  for (int64_t k = 0; k < K; k += kLanes) {
    const __mmask16 mk = mask16(K - k);
    // The B rows two blocks on (weights stream from memory in decode-sized products): prefetching never
    // faults, past the end of B included, and changes no arithmetic.
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++)
      _mm_prefetch(reinterpret_cast<const char*>(br[j] + kPrefetchRows * ldb + k), _MM_HINT_T0);
    __m512 bv[kRows];
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) bv[j] = _mm512_maskz_loadu_ps(mk, br[j] + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      const __m512 av = _mm512_maskz_loadu_ps(mk, a + r * lda + k);
#pragma GCC unroll 4
      for (int j = 0; j < kRows; j++) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  const int64_t cols = std::min<int64_t>(kRows, N - n0);
  // Constant indices only (unrolled), so the accumulators stay in registers through the loop above.
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    float s[kRows];
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) s[j] = lane_sum(acc[r][j]);
    store(c + r * ldc + n0, s, cols, alpha, beta);
  }
}

#endif  // __AVX512F__

#if defined(__AVX512F__) && defined(__AVX512BF16__)

inline __mmask32 mask32(int64_t elems) {
  return elems >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << std::max<int64_t>(elems, 0)) - 1u);
}

// Dot-form register block, bf16 (vdpbf16ps): as dot_block_f32, 32 k per step.
template <int R>
void dot_block_bf16(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t n0, int64_t N,
                    int64_t K, float alpha, float beta, float* c, int64_t ldc) {
  const uint16_t* br[kRows];
  for (int j = 0; j < kRows; j++) br[j] = b + std::min(n0 + j, N - 1) * ldb;
  __m512 acc[R][kRows];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) acc[r][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const __mmask32 mk = mask32(K - k);
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++)
      _mm_prefetch(reinterpret_cast<const char*>(br[j] + kPrefetchRows * ldb + k), _MM_HINT_T0);
    __m512bh bv[kRows];
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) bv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mk, br[j] + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(mk, a + r * lda + k);
#pragma GCC unroll 4
      for (int j = 0; j < kRows; j++) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  const int64_t cols = std::min<int64_t>(kRows, N - n0);
  // Constant indices only (unrolled), so the accumulators stay in registers through the loop above.
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    float s[kRows];
#pragma GCC unroll 4
    for (int j = 0; j < kRows; j++) s[j] = lane_sum(acc[r][j]);
    store(c + r * ldc + n0, s, cols, alpha, beta);
  }
}

#else

#if defined(__AVX2__) && defined(__FMA__)
#define ZAYA_ROWS_BF16_AVX2 1
// The same emulation on 8-float vectors (CPUs without AVX512-BF16 but with AVX2: AMD Zen 3): 16 bf16 of a
// 256-bit load are 8 pairs, lane l's pair (2l, 2l + 1); the high halves of its dwords widened in place
// (mask) are the odd elements, the low halves shifted up the even ones. Lanes 0-7 from the first 16 elements
// of a 32-chunk, 8-15 from the second; the tail chunk zero-padded. The same bits as dot_bf16_scalar.
float dot_bf16_avx2(const uint16_t* a, const uint16_t* b, int64_t K) {
  const __m256i high = _mm256_set1_epi32(int(0xFFFF0000u));
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  auto pairs = [&](__m256 acc, __m256i va, __m256i vb) {
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(va, high)),
                          _mm256_castsi256_ps(_mm256_and_si256(vb, high)), acc);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(va, 16)),
                           _mm256_castsi256_ps(_mm256_slli_epi32(vb, 16)), acc);
  };
  auto chunk = [&](const uint16_t* ak, const uint16_t* bk) {
    const auto* pa = reinterpret_cast<const __m256i*>(ak);
    const auto* pb = reinterpret_cast<const __m256i*>(bk);
    lo = pairs(lo, _mm256_loadu_si256(pa), _mm256_loadu_si256(pb));
    hi = pairs(hi, _mm256_loadu_si256(pa + 1), _mm256_loadu_si256(pb + 1));
  };
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) chunk(a + k, b + k);
  if (k < K) {
    uint16_t ta[32] = {}, tb[32] = {};
    std::memcpy(ta, a + k, size_t(K - k) * 2);
    std::memcpy(tb, b + k, size_t(K - k) * 2);
    chunk(ta, tb);
  }
  return lane_sum16(lo, hi);
}
#endif

// Scalar emulation of the vdpbf16ps lane order (see gemm_rows.h).
[[maybe_unused]] float dot_bf16_scalar(const uint16_t* a, const uint16_t* b, int64_t K) {
  float lane[16] = {};
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    for (int l = 0; l < 16; l++) {
      const int64_t k = k0 + 2 * l;
      const float a1 = k + 1 < K ? bf16_to_f32(a[k + 1]) : 0.0f,
                  b1 = k + 1 < K ? bf16_to_f32(b[k + 1]) : 0.0f;
      const float a0 = k < K ? bf16_to_f32(a[k]) : 0.0f, b0 = k < K ? bf16_to_f32(b[k]) : 0.0f;
      lane[l] = std::fma(a1, b1, lane[l]);
      lane[l] = std::fma(a0, b0, lane[l]);
    }
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return lane[0];
}

#endif

// One tile of the dot form: C[m0 : m1, n0 : n1] from packed A ([M, K], lda) and B ([N, K], ldb).
void dot_tile_f32(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t N, int64_t K, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
#if defined(__AVX512F__)
  for (int64_t n = n0; n < n1; n += kRows) {
    const int64_t nn = std::min(N, n1);  // columns past the tile reuse its last one (never stored)
    for (int64_t m = m0; m < m1; m += kRows) {
      const float* ar = a + m * lda;
      float* cr = C + m * ldc;
      switch (std::min<int64_t>(kRows, m1 - m)) {
        case 1:
          dot_block_f32<1>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
        case 2:
          dot_block_f32<2>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
        case 3:
          dot_block_f32<3>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
        default:
          dot_block_f32<4>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
      }
    }
  }
#else
  (void)N;
  gemm_small_f32(m1 - m0, n1 - n0, K, alpha, mat(a + m0 * lda, lda), mat(b + n0 * ldb, ldb, true), beta,
                 C + m0 * ldc + n0, ldc);
#endif
}

void dot_tile_bf16(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t N, int64_t K, float alpha,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* C,
                   int64_t ldc) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  for (int64_t n = n0; n < n1; n += kRows) {
    const int64_t nn = std::min(N, n1);
    for (int64_t m = m0; m < m1; m += kRows) {
      const uint16_t* ar = a + m * lda;
      float* cr = C + m * ldc;
      switch (std::min<int64_t>(kRows, m1 - m)) {
        case 1:
          dot_block_bf16<1>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
        case 2:
          dot_block_bf16<2>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
        case 3:
          dot_block_bf16<3>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
        default:
          dot_block_bf16<4>(ar, lda, b, ldb, n, nn, K, alpha, beta, cr, ldc);
          break;
      }
    }
  }
#else
  (void)N;
  for (int64_t m = m0; m < m1; m++) {
    float s[1];
    for (int64_t n = n0; n < n1; n++) {
#if defined(ZAYA_ROWS_BF16_AVX2)
      s[0] = dot_bf16_avx2(a + m * lda, b + n * ldb, K);
#else
      s[0] = dot_bf16_scalar(a + m * lda, b + n * ldb, K);
#endif
      store(C + m * ldc + n, s, 1, alpha, beta);
    }
  }
#endif
}

// Runs tile(m0, m1, n0, n1) over every tile of C[M, N] on `threads` threads. Tiles are ordered column panel
// by column panel, so a thread's consecutive tiles share their B panel.
template <typename Tile>
void for_tiles(int64_t M, int64_t N, int threads, const Tile& tile) {
  const int64_t tm = (M + kTileRows - 1) / kTileRows, tn = (N + kTileCols - 1) / kTileCols;
  const int64_t tiles = tm * tn;
  const int nt = int(std::min<int64_t>(threads, tiles));
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t i = 0; i < tiles; i++) {
    const int64_t m0 = (i % tm) * kTileRows, n0 = (i / tm) * kTileCols;
    tile(m0, std::min(M, m0 + kTileRows), n0, std::min(N, n0 + kTileCols));
  }
}

}  // namespace

void gemm_rows(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B, float beta,
               float* C, int64_t ldc, int threads) {
  const bool bf16 = A.dtype == DType::BF16 || B.dtype == DType::BF16;
  if (B.trans && bf16) {
    // Dot form, bf16: both operands as packed bf16 rows along k.
    const uint16_t* a = pack_bf16(A, M, K, t_a16);
    const uint16_t* b;
    int64_t ldb = B.ld;
    if (B.dtype == DType::BF16) {
      b = static_cast<const uint16_t*>(B.data);
    } else {
      b = pack_bf16(MatRef{B.data, B.dtype, B.ld, false}, N, K, t_b16);
      ldb = K;
    }
    for_tiles(M, N, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
      dot_tile_bf16(m0, m1, n0, n1, N, K, alpha, a, K, b, ldb, beta, C, ldc);
    });
    return;
  }
  if (B.trans) {
    // Dot form, fp32: rows of A along k (a transposed A is packed) against the stored rows of B.
    const float* a = static_cast<const float*>(A.data);
    int64_t lda = A.ld;
    if (A.trans) a = pack_f32(A, M, K, false, t_a32), lda = K;
    const float* b = static_cast<const float*>(B.data);
    for_tiles(M, N, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
      dot_tile_f32(m0, m1, n0, n1, N, K, alpha, a, lda, b, B.ld, beta, C, ldc);
    });
    return;
  }
  // Broadcast form (B stored [K, N]): gemm_small's fma chain over k in order, per tile; bf16 operands are
  // widened (exactly) to fp32 first, an fp32 operand paired with bf16 rounded to bf16.
  MatRef a = A, b = B;
  if (bf16) {
    a = mat(pack_f32(A, M, K, true, t_a32), K);
    b = mat(pack_f32(B, K, N, true, t_b32), N);
  }
  for_tiles(M, N, threads, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const auto* ad = static_cast<const float*>(a.data);
    const MatRef at{a.trans ? ad + m0 : ad + m0 * a.ld, DType::F32, a.ld, a.trans};
    const MatRef bt{static_cast<const float*>(b.data) + n0, DType::F32, b.ld, false};
    gemm_small_f32(m1 - m0, n1 - n0, K, alpha, at, bt, beta, C + m0 * ldc + n0, ldc);
  });
}

}  // namespace zaya
