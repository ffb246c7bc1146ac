// Quantized-weight products: the streaming kernel (decode) and the dequantize-then-GEMM path (prefill).
#include "kernels/quant_gemm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
// GCC 12 warns inside its own AVX-512 headers (the masked forms of cvtph2ps / pmovsxbd / cvtdq2ps start
// from an undefined vector): a known false positive, not about this file's variables.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/quant.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "kernels/lane_sum.h"

namespace zaya {

namespace {

// One weight matrix as the kernel reads it: N rows of K elements, row n at q + n·row_bytes, its scales at
// scales + n·scales_per_row (elements of the scales dtype).
struct QMat {
  DType fmt;
  const uint8_t* q;
  size_t row_bytes;
  const void* scales;
  int64_t scales_per_row;
  int64_t N, K;
};

QMat qmat(const Tensor& W, int64_t expert) {
  QMat m;
  m.fmt = W.dtype;
  m.N = W.dim(-2);
  m.K = W.dim(-1);
  m.row_bytes = dtype_row_bytes(W.dtype, m.K);
  m.q = static_cast<const uint8_t*>(W.data) + size_t(expert * m.N) * m.row_bytes;
  m.scales = nullptr;
  m.scales_per_row = 0;
  if (W.scales) {  // BF16 weights have none
    m.scales_per_row = W.scales->shape.back();
    const size_t sbytes = dtype_size(W.scales->dtype);
    m.scales = static_cast<const char*>(W.scales->data) + size_t(expert * m.N * m.scales_per_row) * sbytes;
  }
  return m;
}

// MXFP4 pairs its elements (2k in the low nibble, 2k+1 in the high one); the kernel expands the low
// nibbles of a block to one vector and the high ones to another, so it reads the activations of each block
// of 32 as [16 even elements | 16 odd ones]: a[M, K] -> out[M, K] in that order.
[[maybe_unused]] void deinterleave_blocks(float* out, int64_t ldo, const float* a, int64_t M, int64_t K) {
  for (int64_t m = 0; m < M; m++) {
    for (int64_t b = 0; b < K; b += kQuantBlock) {
      const float* src = a + m * K + b;
      float* dst = out + m * ldo + b;
      for (int64_t j = 0; j < kQuantBlock / 2; j++) {
        dst[j] = src[2 * j];
        dst[kQuantBlock / 2 + j] = src[2 * j + 1];
      }
    }
  }
}

// How many register blocks of 8, 4, 2 and 1 activation rows (largest first) M rows make: the passes a
// multi-row product makes over the same weights.
inline int row_blocks(int64_t M) {
  const int64_t rem = M % 8;
  return int(M / 8 + (rem >= 4) + (rem % 4 >= 2) + (rem % 2));
}

#if defined(__AVX512F__)

// The 32 elements of block b of a row as two fp32 vectors (unscaled): elements [0, 16) and [16, 32), or for
// MXFP4 the even and the odd ones.
template <DType F>
inline void load_block(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  if constexpr (F == DType::Q8_0) {
    const uint8_t* p = row + b * 32;
    *lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    *hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  } else if constexpr (F == DType::MXFP4) {
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                        -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16)));
    *lo = _mm512_permutexvar_ps(bytes, table);  // the permute reads index bits [3:0]: the low nibble
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
  } else if constexpr (F == DType::BF16) {
    const auto* p = reinterpret_cast<const __m256i*>(row + b * 64);
    *lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
    *hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p + 1)), 16));
  } else {
    // e4m3 -> fp16 with the value scaled by 2^-8: S.EEEE.MMM in the high byte, shifted right by one with
    // the sign copied, bit 14 cleared: S.0EEEE.MMM0000000 (subnormals map to fp16 subnormals). The row's
    // 2^8 is applied with its scale. e4m3 has no infinities: S.1111.111 is NaN (f8e4m3_to_f32), which the
    // shift would make ±480 (1.875 in fp16), a plausible weight; those lanes take fp16's NaN instead.
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
    const __m512i w = _mm512_cvtepu8_epi16(codes);
    __m512i h = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 1), _mm512_set1_epi16(0xBFFF));
    const __mmask32 nan =
        _mm256_cmpeq_epi8_mask(_mm256_and_si256(codes, _mm256_set1_epi8(0x7F)), _mm256_set1_epi8(0x7F));
    h = _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7E00));
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  }
}

// Scales of blocks [b0, b0 + n) of a row as floats (n <= 16).
template <DType F>
inline void load_scales(float* sc, const void* scales, int64_t b0, int64_t n) {
  if constexpr (F == DType::Q8_0) {
    const auto* s = static_cast<const uint16_t*>(scales) + b0;
    if (n == 16) {
      _mm512_storeu_ps(sc, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s))));
    } else {
      for (int64_t i = 0; i < n; i++) sc[i] = f16_to_f32(s[i]);
    }
  } else if constexpr (F == DType::MXFP4) {
    const auto* s = static_cast<const uint8_t*>(scales) + b0;
    if (n == 16) {
      const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
      __m512i bits = _mm512_slli_epi32(e, 23);  // 2^(e-127) for e >= 1
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                   _mm512_set1_epi32(0x00400000));  // e = 0: 2^-127, a float subnormal
      _mm512_storeu_ps(sc, _mm512_castsi512_ps(bits));
    } else {
      for (int64_t i = 0; i < n; i++) sc[i] = e8m0_to_f32(s[i]);
    }
  } else {
    (void)scales, (void)b0;
    for (int64_t i = 0; i < n; i++) sc[i] = 1.0f;
  }
}

// out[m, n] for n in [n0, n1), m in [0, MR): rows of `a` (stride K, fp32; MXFP4: deinterleaved per block).
// Blocks [g0, g0 + gn) (gn <= 16: one scale group) of the NR weight rows from n0 against the MR activation
// rows of `a` (stride K, fp32; MXFP4: deinterleaved per block), accumulated into acc[(r) * MR + m] (16-lane
// partial sums kept in memory between calls). Each block of a weight row becomes two fp32 vectors scaled by
// its block scale (Q8_0, MXFP4), then meets every activation row (row m at a + m·lda): each accumulator is
// one chain of fmas over the blocks in order (lo half, then hi half), the same whatever NR, MR and the K
// chunking are, so a result depends on its weight row and activation row only (batch invariant). FP8's row
// scale is applied at the end; BF16 has no scale.
template <DType F, int NR, int MR>
void stream_block(__m512* acc_mem, const float* a, int64_t lda, const QMat& w, int64_t n0, int64_t g0,
                  int64_t gn, bool row_prefetch) {
  constexpr bool kBlockScales = F == DType::Q8_0 || F == DType::MXFP4;
  constexpr int kScaleBytes = F == DType::Q8_0 ? 2 : 1;
  constexpr int64_t kBlockBytes = F == DType::BF16 ? 64 : F == DType::MXFP4 ? 16 : 32;
  // Distance: the next call's rows; with 8 activation rows a call covers only a 16-block chunk of its rows
  // (~300 cycles), less than a trip to memory, so those prefetch 8 calls ahead.
  const size_t prefetch_ahead = size_t(MR >= 8 ? 8 * NR : NR) * w.row_bytes;
  const uint8_t* row[NR];
  alignas(64) float sc[NR][16];
  for (int r = 0; r < NR; r++) {
    row[r] = w.q + size_t(n0 + r) * w.row_bytes;
    if constexpr (kBlockScales)
      load_scales<F>(sc[r],
                     static_cast<const char*>(w.scales) + size_t((n0 + r) * w.scales_per_row) * kScaleBytes,
                     g0, gn);
  }
  __m512 acc[NR][MR];
  for (int r = 0; r < NR; r++)
    for (int m = 0; m < MR; m++) acc[r][m] = acc_mem[r * MR + m];
  for (int64_t i = 0; i < gn; i++) {
    const int64_t b = g0 + i;
    __m512 lo[NR], hi[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      // Rows are a few KB, so each is a new page to the hardware prefetcher, which never ramps up on it:
      // fetch the next NR rows (the next call's) as these stream, one line per 64 bytes.
      if (row_prefetch) {
        if constexpr (kBlockBytes >= 64) {
          _mm_prefetch(reinterpret_cast<const char*>(row[r] + prefetch_ahead + b * kBlockBytes), _MM_HINT_T0);
        } else {
          if ((b & (64 / kBlockBytes - 1)) == 0)
            _mm_prefetch(reinterpret_cast<const char*>(row[r] + prefetch_ahead + b * kBlockBytes),
                         _MM_HINT_T0);
        }
      }
      load_block<F>(row[r], b, &lo[r], &hi[r]);
      if constexpr (kBlockScales) {
        const __m512 d = _mm512_set1_ps(sc[r][i]);
        lo[r] = _mm512_mul_ps(lo[r], d);
        hi[r] = _mm512_mul_ps(hi[r], d);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) {
      const float* am = a + m * lda + b * 32;
      const __m512 al = _mm512_loadu_ps(am), ah = _mm512_loadu_ps(am + 16);
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        acc[r][m] = _mm512_fmadd_ps(lo[r], al, acc[r][m]);
        acc[r][m] = _mm512_fmadd_ps(hi[r], ah, acc[r][m]);
      }
    }
  }
  for (int r = 0; r < NR; r++)
    for (int m = 0; m < MR; m++) acc_mem[r * MR + m] = acc[r][m];
}

// MR activation rows against weight rows [n0, n1), NR rows at a time (as many as the registers hold beside
// the NR x MR accumulators), the rest one by one. With 8 activation rows (32 KB at K = 1024) K goes in chunks
// of 16 blocks (512 inputs: the rows' chunk stays in L1 while every weight row of the tile passes); fewer
// rows stay in L1 whole, and each weight row streams front to back (what the prefetchers like). Chunking
// does not change any result: the partial sums are kept as they are between chunks. Prefetch: with `ahead`
// null each row fetches the rows NR ahead of it into L1 as it streams; otherwise those bytes [ahead, ahead +
// ahead_bytes) go to L2 instead, spread evenly over the stream_block calls (stream_tile's next slice).
template <DType F, int MR>
void stream_rows(float* out, int64_t ldc, const float* a, int64_t lda, const QMat& w, int64_t n0, int64_t n1,
                 const uint8_t* ahead = nullptr, size_t ahead_bytes = 0) {
  constexpr int NR = MR >= 8 ? 2 : MR >= 2 ? 4 : 8;
  const int64_t nb = w.K / 32, rows = n1 - n0;
  thread_local std::vector<__m512> acc;
  acc.assign(size_t(rows * MR), _mm512_setzero_ps());
  const int64_t chunk = MR >= 8 ? 16 : (nb + 15) / 16 * 16;  // blocks per K chunk, a multiple of 16
  const int64_t calls = (rows / NR + rows % NR) * ((nb + 15) / 16);
  const size_t step = ahead ? (ahead_bytes + size_t(calls) - 1) / size_t(calls) : 0;
  int64_t call = 0;
  auto fetch_ahead = [&]() {
    if (!ahead) return;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(ahead) + size_t(call++) * step;
    const uintptr_t hi = std::min(lo + step, reinterpret_cast<uintptr_t>(ahead) + ahead_bytes);
    for (uintptr_t at = lo & ~uintptr_t(63); at < hi; at += 64)
      _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
  };
  const bool row_prefetch = ahead == nullptr;
  for (int64_t c0 = 0; c0 < nb; c0 += chunk) {
    const int64_t c1 = std::min(nb, c0 + chunk);
    int64_t n = n0;
    for (; n + NR <= n1; n += NR)
      for (int64_t g = c0; g < c1; g += 16) {
        fetch_ahead();
        stream_block<F, NR, MR>(acc.data() + (n - n0) * MR, a, lda, w, n, g, std::min<int64_t>(16, c1 - g),
                                row_prefetch);
      }
    for (; n < n1; n++)
      for (int64_t g = c0; g < c1; g += 16) {
        fetch_ahead();
        stream_block<F, 1, MR>(acc.data() + (n - n0) * MR, a, lda, w, n, g, std::min<int64_t>(16, c1 - g),
                               row_prefetch);
      }
  }
  for (int64_t n = n0; n < n1; n++) {
    float rs = 1.0f;
    if constexpr (F == DType::F8_E4M3)
      rs = static_cast<const float*>(w.scales)[n * w.scales_per_row] * 256.0f;
    for (int m = 0; m < MR; m++) out[m * ldc + n] = _mm512_reduce_add_ps(acc[size_t((n - n0) * MR + m)]) * rs;
  }
}

// Rows [n0, n1) for all M activation rows, in register blocks of 8, 4, 2 and 1 activation rows. With more
// than 8 rows each weight row meets several blocks: the weight rows go in slices of about 256 kB, so that
// every block after the first finds the slice in L2 instead of streaming it from memory again. Only the first
// block would then read memory, in a burst, and the others compute on what is cached; instead block i of P
// fetches part i of the next slice into L2 as it goes, so memory is read at an even pace (bf16, 16 rows,
// [4096, 2048] from memory, 2 threads of an Intel Xeon, interleaved pairs: 10.2 / 10.0 -> 11.0 / 10.9 GB/s).
template <DType F>
void stream_tile(float* out, int64_t ldc, const float* a, int64_t lda, int64_t M, const QMat& w, int64_t n0,
                 int64_t n1) {
  const bool sliced = M > 8;
  const int64_t slice = sliced ? std::max<int64_t>(8, int64_t(256 << 10) / int64_t(w.row_bytes)) : n1 - n0;
  const size_t passes = size_t(row_blocks(M));
  for (int64_t s0 = n0; s0 < n1; s0 += slice) {
    const int64_t s1 = std::min(n1, s0 + slice);
    // The next slice's bytes, one part per block of activation rows (none unsliced or at the tile's end).
    const uint8_t* next = w.q + size_t(s1) * w.row_bytes;
    const size_t next_bytes = sliced ? size_t(std::min(n1, s1 + slice) - s1) * w.row_bytes : 0;
    const size_t part = (next_bytes + passes - 1) / passes;
    // Part i: [next + i·part, next + min((i + 1)·part, next_bytes)), none past the end.
    auto ahead = [&](size_t i) { return i * part < next_bytes ? next + i * part : nullptr; };
    auto ahead_len = [&](size_t i) {
      return i * part < next_bytes ? std::min(part, next_bytes - i * part) : 0;
    };
    int64_t m = 0;
    size_t i = 0;
    for (; m + 8 <= M; m += 8, i++)
      stream_rows<F, 8>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1, ahead(i), ahead_len(i));
    if (M - m >= 4)
      stream_rows<F, 4>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1, ahead(i), ahead_len(i)), m += 4, i++;
    if (M - m >= 2)
      stream_rows<F, 2>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1, ahead(i), ahead_len(i)), m += 2, i++;
    if (M - m >= 1)
      stream_rows<F, 1>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1, ahead(i), ahead_len(i));
  }
}

// Rows [n0, n0 + rows) of W dequantized into out[rows, K] (fp32 or bf16: exactly one of them non-null):
// each block as the streaming kernel sees it, times its scale (MXFP4's even/odd halves interleaved back).
template <DType F>
void dequant_rows(float* out32, uint16_t* out16, const QMat& w, int64_t n0, int64_t rows) {
  const int64_t K = w.K, nb = K / 32;
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = n0 + r;
    const uint8_t* row = w.q + size_t(n) * w.row_bytes;
    const char* srow =
        static_cast<const char*>(w.scales) + size_t(n * w.scales_per_row) * (F == DType::Q8_0    ? 2
                                                                             : F == DType::MXFP4 ? 1
                                                                                                 : 4);
    float row_scale = 1.0f;
    if constexpr (F == DType::F8_E4M3)
      row_scale = static_cast<const float*>(w.scales)[n * w.scales_per_row] * 256.0f;
    for (int64_t g = 0; g < nb; g += 16) {
      const int64_t gn = std::min<int64_t>(16, nb - g);
      alignas(64) float sc[16];
      load_scales<F>(sc, srow, g, gn);
      for (int64_t i = 0; i < gn; i++) {
        const int64_t b = g + i;
        __m512 lo, hi;
        load_block<F>(row, b, &lo, &hi);
        const __m512 d = _mm512_set1_ps(sc[i] * row_scale);
        lo = _mm512_mul_ps(lo, d);
        hi = _mm512_mul_ps(hi, d);
        if constexpr (F == DType::MXFP4) {
          const __m512 a = _mm512_permutex2var_ps(lo, lo_idx, hi), c = _mm512_permutex2var_ps(lo, hi_idx, hi);
          lo = a, hi = c;
        }
        const int64_t at = r * K + b * 32;
        if (out32) {
          _mm512_storeu_ps(out32 + at, lo);
          _mm512_storeu_ps(out32 + at + 16, hi);
        } else {
#if defined(__AVX512BF16__)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out16 + at), (__m256i)_mm512_cvtneps_pbh(lo));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out16 + at + 16), (__m256i)_mm512_cvtneps_pbh(hi));
#else
          alignas(64) float t[32];
          _mm512_store_ps(t, lo);
          _mm512_store_ps(t + 16, hi);
          for (int j = 0; j < 32; j++) out16[at + j] = f32_to_bf16(t[j]);
#endif
        }
      }
    }
  }
}

#endif  // __AVX512F__

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ZAYA_STREAM_AVX2 1

// ---- The fp32 streaming kernel on 256-bit vectors: decode on CPUs without AVX-512 (AMD Zen 3, Intel
// before Skylake-SP), and on every AVX2 build through QuantPath::StreamAvx2 (tests). ----

// The 32 elements of block b of a row as four fp32 vectors of 8 (unscaled): elements [0, 8), [8, 16), [16,
// 24), [24, 32), or for MXFP4 the even ones then the odd ones.
template <DType F>
inline void load_block8(const uint8_t* row, int64_t b, __m256* v) {
  if constexpr (F == DType::Q8_0) {
    const uint8_t* p = row + b * 32;
    for (int j = 0; j < 4; j++)
      v[j] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * j))));
  } else if constexpr (F == DType::MXFP4) {
    // E2M1 codes -> twice their value as int8 (0, ±0.5, ... ±6 -> 0, ±1, ... ±12); the scale halves them.
    const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16));
    const __m128i nib = _mm_set1_epi8(15);
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, nib));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), nib));
    v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
  } else if constexpr (F == DType::BF16) {
    const auto* p = reinterpret_cast<const __m128i*>(row + b * 64);
    for (int j = 0; j < 4; j++)
      v[j] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p + j)), 16));
  } else {
    // e4m3 S.EEEE.MMM sign-extended to 32 bits and shifted left by 20 puts EEEE.MMM in fp32's top exponent
    // and mantissa bits and S in bit 31 (the mask drops the extension): the fp32 whose value is the e4m3
    // value times 2^-120 (e4m3 subnormals become fp32 subnormals, exactly). One multiply by 2^120 restores
    // it, exactly: 4 instructions per 8 weights where the fp16 route (load_block's) takes 6. The value then
    // is the same as load_block's times 2^8, which the row scale leaves out (stream_rows8): same sums.
    // NaN (S.1111.111, f8e4m3_to_f32) would come out as ±480: a block holding one (a broken checkpoint; one
    // compare per block finds it) takes the lanes' NaN by a second pass.
    const uint8_t* p = row + b * 32;
    const __m256i keep = _mm256_set1_epi32(int(0x87F00000u));
    const __m256 two_120 = _mm256_set1_ps(0x1p120f);
    __m256i x[4];
    for (int j = 0; j < 4; j++) {
      x[j] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * j)));
      v[j] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(x[j], 20), keep)), two_120);
    }
    const __m256i low7 = _mm256_set1_epi8(0x7f);
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, low7), low7)) != 0) {
      // S.1111.111 sign-extended and shifted left by 25 is 0xFE000000 for either sign.
      const __m256i nan_code = _mm256_set1_epi32(int(0xFE000000u));
      for (int j = 0; j < 4; j++)
        v[j] = _mm256_or_ps(v[j],
                            _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_slli_epi32(x[j], 25), nan_code)));
    }
  }
}

// Block b's scale (Q8_0: fp16; MXFP4: E8M0 times 1/2 for load_block8's doubled values).
template <DType F>
inline float block_scale8(const void* scales, int64_t b) {
  if constexpr (F == DType::Q8_0) return f16_to_f32(static_cast<const uint16_t*>(scales)[b]);
  return e8m0_to_f32(static_cast<const uint8_t*>(scales)[b]) * 0.5f;
}

// out[m, n] = Σ_k W[n, k]·a[m, k] for n in [n0, n1), m in [0, MR) (row m of `a` at a + m·lda; MXFP4:
// deinterleaved per block). Each weight row streams front to back; every block becomes four fp32 vectors
// times its scale and meets every activation row. Each (row, activation row) keeps four chains of fmas, one
// per vector of a block (one chain would wait on the fma latency: 4 x 4 cycles a block, measured 7 GB/s a
// Zen 3 core), summed in a fixed order at the end: the same whatever MR and M, so a result depends on its
// weight row and activation row only (batch invariant).
template <DType F, int MR>
void stream_rows8(float* out, int64_t ldc, const float* a, int64_t lda, const QMat& w, int64_t n0,
                  int64_t n1) {
  constexpr bool kBlockScales = F == DType::Q8_0 || F == DType::MXFP4;
  constexpr int kScaleBytes = F == DType::Q8_0 ? 2 : 1;
  const int64_t nb = w.K / 32;
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t* row = w.q + size_t(n) * w.row_bytes;
    const void* srow = kBlockScales
                           ? static_cast<const char*>(w.scales) + size_t(n * w.scales_per_row) * kScaleBytes
                           : nullptr;
    __m256 acc[MR][4];
    for (int m = 0; m < MR; m++)
      for (int j = 0; j < 4; j++) acc[m][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
      __m256 v[4];
      load_block8<F>(row, b, v);
      if constexpr (kBlockScales) {
        const __m256 d = _mm256_set1_ps(block_scale8<F>(srow, b));
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(v[j], d);
      }
      for (int m = 0; m < MR; m++) {
        const float* am = a + m * lda + b * 32;
        for (int j = 0; j < 4; j++) acc[m][j] = _mm256_fmadd_ps(v[j], _mm256_loadu_ps(am + 8 * j), acc[m][j]);
      }
    }
    float rs = 1.0f;
    if constexpr (F == DType::F8_E4M3) rs = static_cast<const float*>(w.scales)[n * w.scales_per_row];
    for (int m = 0; m < MR; m++) {
      // Chains (0 + 1) + (2 + 3), then the lanes in a fixed tree (lane_sum8).
      out[m * ldc + n] =
          lane_sum8(_mm256_add_ps(_mm256_add_ps(acc[m][0], acc[m][1]), _mm256_add_ps(acc[m][2], acc[m][3]))) *
          rs;
    }
  }
}

// Rows [n0, n1) for all M activation rows, 3, 2 and 1 activation rows at a time (3 x 4 chains and a weight
// vector fill the 16 registers; the activations are fma memory operands). With more than 3 rows each weight
// row meets several row sets: the weight rows go in slices of about 128 kB, which later sets find in L2.
template <DType F>
void stream_tile8(float* out, int64_t ldc, const float* a, int64_t lda, int64_t M, const QMat& w, int64_t n0,
                  int64_t n1) {
  const int64_t slice = M > 3 ? std::max<int64_t>(4, int64_t(128 << 10) / int64_t(w.row_bytes)) : n1 - n0;
  for (int64_t s0 = n0; s0 < n1; s0 += slice) {
    const int64_t s1 = std::min(n1, s0 + slice);
    int64_t m = 0;
    for (; M - m >= 3 && M - m != 4; m += 3)
      stream_rows8<F, 3>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1);
    for (; M - m >= 2; m += 2) stream_rows8<F, 2>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1);
    if (M - m >= 1) stream_rows8<F, 1>(out + m * ldc, ldc, a + m * lda, lda, w, s0, s1);
  }
}

// Whether the AVX2 kernel takes W: whole blocks of 32 in a format it reads.
bool stream8_takes(const QMat& w) {
  return w.K % 32 == 0 &&
         (w.fmt == DType::Q8_0 || w.fmt == DType::MXFP4 || w.fmt == DType::F8_E4M3 || w.fmt == DType::BF16);
}

void stream_tile8_any(float* out, int64_t ldc, const float* a, int64_t lda, int64_t M, const QMat& w,
                      int64_t n0, int64_t n1) {
  switch (w.fmt) {
    case DType::Q8_0:
      return stream_tile8<DType::Q8_0>(out, ldc, a, lda, M, w, n0, n1);
    case DType::MXFP4:
      return stream_tile8<DType::MXFP4>(out, ldc, a, lda, M, w, n0, n1);
    case DType::F8_E4M3:
      return stream_tile8<DType::F8_E4M3>(out, ldc, a, lda, M, w, n0, n1);
    default:
      return stream_tile8<DType::BF16>(out, ldc, a, lda, M, w, n0, n1);
  }
}

// ---- The int8 kernel on 256-bit vectors: Q8_0 and MXFP4 weights on their own layout, activations quantized
// per block to int8 (ActQ8, as the VNNI kernel; MXFP4: deinterleaved first). Decode takes it in builds
// without AVX512-VNNI: a block costs a sign, a vpmaddubsw, a vpmaddwd, a conversion and an fma per
// activation row, where the fp32 kernel widens 32 weights to fp32 (8 conversions, 4 multiplies) first. ----

// Block b of a row as 32 int8: Q8_0 as stored; MXFP4 as twice the E2M1 values (0, ±1, ... ±12: the scale is
// halved, block_scale8), the 16 even elements then the 16 odd ones.
template <DType F>
inline __m256i load_block_i8(const uint8_t* row, int64_t b) {
  if constexpr (F == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
  } else {
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16));
    const __m256i codes =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes), _mm256_set1_epi8(15));
    return _mm256_shuffle_epi8(table, codes);
  }
}

// MXFP4 blocks b and b + 1 of a row as load_block_i8 gives them, from one 256-bit load: the low nibbles of
// both blocks (their even elements) and the high ones (odd elements) looked up in one shuffle each, then
// each block's even and odd halves joined across the 128-bit lanes.
inline void load_block_pair_i8(__m256i out[2], const uint8_t* row, int64_t b) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 16));
  const __m256i nib = _mm256_set1_epi8(15);
  const __m256i even = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, nib));
  const __m256i odd = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nib));
  out[0] = _mm256_permute2x128_si256(even, odd, 0x20);  // block b: its even elements, then its odd ones
  out[1] = _mm256_permute2x128_si256(even, odd, 0x31);  // block b + 1
}

// The 8 partial integer dots of a block (w, a: 32 int8 each) as fp32 lanes. vpmaddubsw multiplies unsigned by
// signed bytes, so |w| meets a with w's sign; a pair's sum is at most 2 · 128 · 127 < 2^15 (activations are
// in [-127, 127]): no saturation, the lanes are exact.
inline __m256 block_dot_i8(__m256i w_abs, __m256i w, __m256i a) {
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// The scales of blocks [b, b + 8) of a row as fp32, as block_scale8 gives them one by one (MXFP4: E8M0
// halved; code 0 is 2^-127 halved, a subnormal; code 255 is NaN).
template <DType F>
inline __m256 block_scales8(const void* srow, int64_t b) {
  if constexpr (F == DType::Q8_0) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(srow) + b)));
  } else {
    const __m256i e = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(srow) + b)));
    __m256i bits = _mm256_slli_epi32(e, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000),
                              _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000),
                              _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0.5f));
  }
}

// out[m, n] for n in [n0, n1) and the MR activation rows m0 .. m0 + MR - 1 of `a` (out points at row m0);
// `scale` holds MR · K / 32 floats of scratch. Per row: first every block's s_w · s_a (8 blocks a vector),
// then per (row, activation row) two chains of fmas (even and odd blocks), lane · (s_w · s_a) per block,
// summed (0 + 1) then in stream_rows8's fixed lane tree: the same whatever MR and M (batch invariant).
template <DType F, int MR>
void int8_rows8(float* out, int64_t ldc, const ActQ8& a, int64_t m0, const QMat& w, int64_t n0, int64_t n1,
                float* scale) {
  constexpr int kScaleBytes = F == DType::Q8_0 ? 2 : 1;
  const int64_t nb = w.K / 32;
  const int8_t* aq[MR];
  const float* ad[MR];
  for (int m = 0; m < MR; m++) {
    aq[m] = a.q.data() + (m0 + m) * w.K;
    ad[m] = a.d.data() + (m0 + m) * nb;
  }
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t* row = w.q + size_t(n) * w.row_bytes;
    const void* srow = static_cast<const char*>(w.scales) + size_t(n * w.scales_per_row) * kScaleBytes;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      const __m256 dw = block_scales8<F>(srow, b);
      for (int m = 0; m < MR; m++)
        _mm256_storeu_ps(scale + m * nb + b, _mm256_mul_ps(dw, _mm256_loadu_ps(ad[m] + b)));
    }
    for (; b < nb; b++) {
      const float dw = block_scale8<F>(srow, b);
      for (int m = 0; m < MR; m++) scale[m * nb + b] = dw * ad[m][b];
    }
    __m256 acc[MR][2];
    for (int m = 0; m < MR; m++) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    auto block_dot_rows = [&](__m256i wq, int64_t bi, int chain) {
      const __m256i w_abs = _mm256_sign_epi8(wq, wq);  // -128 -> 0x80, read as u8 128
#pragma GCC unroll 4
      for (int m = 0; m < MR; m++) {
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq[m] + bi * 32));
        acc[m][chain] = _mm256_fmadd_ps(block_dot_i8(w_abs, wq, av), _mm256_broadcast_ss(scale + m * nb + bi),
                                        acc[m][chain]);
      }
    };
    auto block = [&](int64_t bi, int chain) { block_dot_rows(load_block_i8<F>(row, bi), bi, chain); };
    for (b = 0; b + 2 <= nb; b += 2) {
      if constexpr (F == DType::MXFP4) {
        // Both blocks' nibbles in one 256-bit load: block(b) would widen each half on its own (a 128-bit
        // load, shift and insert per block); the same int8 values, so the same sums.
        __m256i pair[2];
        load_block_pair_i8(pair, row, b);
        block_dot_rows(pair[0], b, 0);
        block_dot_rows(pair[1], b + 1, 1);
      } else {
        block(b, 0);
        block(b + 1, 1);
      }
    }
    if (b < nb) block(b, 0);
    for (int m = 0; m < MR; m++) out[m * ldc + n] = lane_sum8(_mm256_add_ps(acc[m][0], acc[m][1]));
  }
}

// Rows [n0, n1) for activation rows m0 .. m0 + M - 1, 4, 2 and 1 at a time; beyond 4 rows the weight rows go
// in slices of about 128 kB that later row sets find in L2 (as stream_tile8).
template <DType F>
void int8_tile8(float* out, int64_t ldc, const ActQ8& a, int64_t m0, int64_t M, const QMat& w, int64_t n0,
                int64_t n1) {
  thread_local std::vector<float> scale;
  scale.resize(size_t(4 * (w.K / 32)));
  const int64_t slice = M > 4 ? std::max<int64_t>(4, int64_t(128 << 10) / int64_t(w.row_bytes)) : n1 - n0;
  for (int64_t s0 = n0; s0 < n1; s0 += slice) {
    const int64_t s1 = std::min(n1, s0 + slice);
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) int8_rows8<F, 4>(out + m * ldc, ldc, a, m0 + m, w, s0, s1, scale.data());
    if (M - m >= 2) int8_rows8<F, 2>(out + m * ldc, ldc, a, m0 + m, w, s0, s1, scale.data()), m += 2;
    if (M - m >= 1) int8_rows8<F, 1>(out + m * ldc, ldc, a, m0 + m, w, s0, s1, scale.data());
  }
}

void int8_tile8_any(float* out, int64_t ldc, const ActQ8& a, int64_t m0, int64_t M, const QMat& w, int64_t n0,
                    int64_t n1) {
  if (w.fmt == DType::Q8_0) return int8_tile8<DType::Q8_0>(out, ldc, a, m0, M, w, n0, n1);
  int8_tile8<DType::MXFP4>(out, ldc, a, m0, M, w, n0, n1);
}

// Rows [n0, n0 + rows) of W dequantized into out32 or out16 ([rows, K], natural element order): load_block8's
// vectors times the block's (or, FP8, the row's) scale, one multiply an element as dequantize_row does, so
// the same values (MXFP4: twice the E2M1 value times half the scale, exact). Prefill's tiles on AVX2 builds
// (dequantize_row's FP8 path calls ldexp per element).
template <DType F>
void dequant_rows8(float* out32, uint16_t* out16, const QMat& w, int64_t n0, int64_t rows) {
  constexpr int kScaleBytes = F == DType::Q8_0 ? 2 : F == DType::MXFP4 ? 1 : 4;
  const int64_t K = w.K, nb = K / 32;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = n0 + r;
    const uint8_t* row = w.q + size_t(n) * w.row_bytes;
    const void* srow = static_cast<const char*>(w.scales) + size_t(n * w.scales_per_row) * kScaleBytes;
    for (int64_t b = 0; b < nb; b++) {
      __m256 v[4];
      load_block8<F>(row, b, v);
      const float d = F == DType::F8_E4M3 ? static_cast<const float*>(w.scales)[n * w.scales_per_row]
                                          : block_scale8<F>(srow, b);
      const __m256 dv = _mm256_set1_ps(d);
      for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(v[j], dv);
      if constexpr (F == DType::MXFP4) {
        // v: elements 0, 2, .. 14 | 16, .. 30 | 1, 3, .. 15 | 17, .. 31: interleave back to 0, 1, 2, ...
        __m256 e[4];
        for (int h = 0; h < 2; h++) {
          const __m256 lo = _mm256_unpacklo_ps(v[h], v[h + 2]), hi = _mm256_unpackhi_ps(v[h], v[h + 2]);
          e[2 * h] = _mm256_permute2f128_ps(lo, hi, 0x20);
          e[2 * h + 1] = _mm256_permute2f128_ps(lo, hi, 0x31);
        }
        for (int j = 0; j < 4; j++) v[j] = e[j];
      }
      alignas(32) float t[32];
      float* dst = out32 ? out32 + r * K + b * 32 : t;
      for (int j = 0; j < 4; j++) _mm256_storeu_ps(dst + 8 * j, v[j]);
      if (!out32) convert_f32_to_bf16(out16 + r * K + b * 32, t, 32);
    }
  }
}

#endif  // ZAYA_STREAM_AVX2

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define ZAYA_DECODE_VNNI 1

// ---- The VNNI kernel over packed weights (quant_gemm.h: pack_for_decode) ----

// Bytes per (group of 16 rows, block of 32): the payload, then the rows' scales.
constexpr size_t kQ8PackBlock = 8 * 64 + 16 * 2;   // Q8_0: 8 vectors of 16 rows x 4 u8, 16 fp16 scales
constexpr size_t kFp4PackBlock = 4 * 64 + 16 * 1;  // MXFP4: 4 vectors of 16 rows x 4 nibble pairs, 16 E8M0
constexpr size_t kBf16PackBlock = 16 * 64;         // BF16: 16 vectors of 16 rows x 1 element pair
constexpr size_t kFp8PackBlock = 8 * 64;           // FP8: 8 vectors of 16 rows x 2 byte pairs (no scales)

constexpr size_t kPackPrefetchBytes = 4096;

struct DecodePack {
  DType fmt;
  int64_t E, N, K, nb;
  size_t block_bytes;
  std::shared_ptr<void> mem;
  const uint8_t* data;  // [E][N / 16][nb][block_bytes]
  // FP8: [E·N] each row's weight_scale times 2^8 (the kernel's fp16 values are the e4m3 ones times 2^-8).
  std::vector<float> row_scale;
  const uint8_t* group(int64_t e, int64_t g) const {
    return data + (size_t(e) * size_t(N / 16) + size_t(g)) * size_t(nb) * block_bytes;
  }
};

// Group g (rows 16g .. 16g + 15) of expert e of W, packed into dst ([nb][block_bytes]).
void pack_group(uint8_t* dst, const QMat& w, int64_t g) {
  const int64_t nb = w.K / 32;
  for (int64_t b = 0; b < nb; b++) {
    for (int r = 0; r < 16; r++) {
      const int64_t n = 16 * g + r;
      const uint8_t* row = w.q + size_t(n) * w.row_bytes;
      if (w.fmt == DType::BF16) {
        // Vector j, dword r: elements 32b + 2j (low half) and 32b + 2j + 1 (high half) of the row.
        uint8_t* blk = dst + size_t(b) * kBf16PackBlock;
        for (int j = 0; j < 16; j++) std::memcpy(blk + j * 64 + r * 4, row + (b * 32 + 2 * j) * 2, 4);
      } else if (w.fmt == DType::F8_E4M3) {
        // Vector q: word r holds elements 32b + 4q (low byte) and 4q + 1 (high byte) of the row, word 16 + r
        // elements 4q + 2 and 4q + 3.
        uint8_t* blk = dst + size_t(b) * kFp8PackBlock;
        for (int q = 0; q < 8; q++) {
          std::memcpy(blk + q * 64 + 2 * r, row + b * 32 + 4 * q, 2);
          std::memcpy(blk + q * 64 + 32 + 2 * r, row + b * 32 + 4 * q + 2, 2);
        }
      } else if (w.fmt == DType::Q8_0) {
        uint8_t* blk = dst + size_t(b) * kQ8PackBlock;
        for (int q = 0; q < 8; q++)
          for (int j = 0; j < 4; j++) blk[q * 64 + r * 4 + j] = uint8_t(row[b * 32 + 4 * q + j] ^ 0x80);
        std::memcpy(blk + 512 + 2 * r, static_cast<const uint16_t*>(w.scales) + n * w.scales_per_row + b, 2);
      } else {
        uint8_t* blk = dst + size_t(b) * kFp4PackBlock;
        auto code = [&](int64_t k) {  // E2M1 code of element k of block b
          const uint8_t byte = row[b * 16 + k / 2];
          return (k & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0x0F);
        };
        for (int p = 0; p < 4; p++)
          for (int j = 0; j < 4; j++)
            blk[p * 64 + r * 4 + j] = uint8_t(code(4 * p + j) | (code(4 * p + 16 + j) << 4));
        blk[256 + r] = static_cast<const uint8_t*>(w.scales)[n * w.scales_per_row + b];
      }
    }
  }
}

// The whole pages inside [p, p + n) handed back (MADV_PAGEOUT keeps contents: anonymous pages would be
// swapped, file pages dropped). A hint: failure (an old kernel) changes nothing but memory use.
void release_pages(const void* p, size_t n) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page, end = (uintptr_t(p) + n) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
}

const DecodePack* decode_pack_of(const Tensor& W) {
  return static_cast<const DecodePack*>(W.decode_pack.get());
}

// W's pack for the int8 (VNNI) kernels: Q8_0 or MXFP4; null for a float pack or none.
const DecodePack* int8_pack_of(const Tensor& W) {
  const DecodePack* p = decode_pack_of(W);
  return p && (p->fmt == DType::Q8_0 || p->fmt == DType::MXFP4) ? p : nullptr;
}

// W's pack for the float packed kernels (BF16, FP8); null otherwise.
const DecodePack* float_pack_of(const Tensor& W) {
  const DecodePack* p = decode_pack_of(W);
  return p && (p->fmt == DType::BF16 || p->fmt == DType::F8_E4M3) ? p : nullptr;
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Software prefetch for the packed weights, spread evenly over the passes a group gets. With one pass (1, 2,
// 4 or 8 rows) each block fetches the block kPackPrefetchBytes ahead into L1. With several passes (3, 5-7 and
// 9+ rows: the group stays in L1 between them) the demand stream reads memory only in the first one, so pass
// `i` of `passes` fetches part i of the next group into L2, block by block: memory is read at an even pace
// the whole time instead of in bursts while the later passes compute (Q8_0, 16 rows, [4096, 2048] from
// memory, 2 threads of an Intel Xeon, interleaved pairs: 13.3 / 14.7 -> 17.5 / 17.3 GB/s; into L1, or two
// groups ahead, did no better).
struct Prefetch {
  const uint8_t* base;  // the address block 0 fetches from
  size_t step;          // bytes per block
  bool to_l2;
  Prefetch(const uint8_t* grp, const DecodePack& p, int passes, int pass) {
    const size_t group_bytes = size_t(p.nb) * p.block_bytes;
    if (passes == 1) {
      base = grp + kPackPrefetchBytes, step = p.block_bytes, to_l2 = false;
    } else {
      step = (p.block_bytes + size_t(passes) - 1) / size_t(passes);
      base = grp + group_bytes + size_t(pass) * step * size_t(p.nb), to_l2 = true;
    }
  }
  // The lines of [base + b·step, base + (b + 1)·step). Prefetching past the pack's end never faults.
  void block(int64_t b) const {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(base) + size_t(b) * step;
    for (uintptr_t at = lo & ~uintptr_t(63); at < lo + step; at += 64) {
      if (to_l2) {
        _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
      }
    }
  }
};

// The VNNI kernel's activations in its read order. For each region of R rows (a grouped call's expert, or all
// M rows of a one-matrix call) starting at row r0, block by block: q[b][R][32] at r0·K, neg_sum128[b][R] and
// d[b][R] at r0·nb. A block's rows then sit side by side, so a register block of rows reads them at fixed
// offsets from three pointers; with one row per ActQ8 row (the [M, K] layout) the kernel computed each row's
// address per block, and at 8 rows GCC spilled those pointers (Zen 5, [4096, 2048] from memory, in-process
// randomly interleaved: Q8_0 16 rows 17.9 / 21.8 -> 24.7 / 27.7 GB/s, MXFP4 2 rows 34.6 / 38.8 -> 40.3 /
// 41.7; 1 and 4 rows level). Regions of one row are ActQ8's own layout, so then nothing is copied.
struct ActBlocksView {
  const int8_t* q;
  const int32_t* neg_sum128;
  const float* d;
};

// The block-by-block copy an ActBlocksView points into when some region has 2+ rows (ActQ8's three arrays
// in the order above).
struct ActBlocks {
  std::vector<int8_t> q;            // per region [nb][R][32]
  std::vector<int32_t> neg_sum128;  // per region [nb][R]
  std::vector<float> d;             // per region [nb][R]
};

// `a` as ActBlocksView for the regions [offsets[e], offsets[e + 1]), e < E; the copy goes to `scratch` (the
// calling thread's; the view may point into it or into `a`).
ActBlocksView act_blocks(ActBlocks* scratch, const ActQ8& a, const int64_t* offsets, int64_t E, int64_t K) {
  bool one_row = true;
  for (int64_t e = 0; e < E; e++) one_row &= offsets[e + 1] - offsets[e] <= 1;
  if (one_row) return {a.q.data(), a.neg_sum128.data(), a.d.data()};
  const int64_t nb = K / 32, M = offsets[E];
  scratch->q.resize(size_t(M * K));
  scratch->neg_sum128.resize(size_t(M * nb));
  scratch->d.resize(size_t(M * nb));
  for (int64_t e = 0; e < E; e++) {
    const int64_t r0 = offsets[e], R = offsets[e + 1] - r0;
    int8_t* q = scratch->q.data() + r0 * K;
    int32_t* ns = scratch->neg_sum128.data() + r0 * nb;
    float* d = scratch->d.data() + r0 * nb;
    for (int64_t b = 0; b < nb; b++) {
      for (int64_t m = 0; m < R; m++) {
        std::memcpy(q + (b * R + m) * 32, a.q.data() + (r0 + m) * K + b * 32, 32);
        ns[b * R + m] = a.neg_sum128[size_t((r0 + m) * nb + b)];
        d[b * R + m] = a.d[size_t((r0 + m) * nb + b)];
      }
    }
  }
  return {scratch->q.data(), scratch->neg_sum128.data(), scratch->d.data()};
}

// out[m, 16g .. 16g + 15] for MR activation rows (out points at the first), from group `grp`; their block b
// at q + b·R·32 + m·32, neg_sum128 / d + b·R + m (ActBlocksView, R the region's rows). Per block: the integer
// dots of 16 weight rows with each activation row (vpdpbusd on u8 = w + 128 weights, started from -128 · Σ
// a_q to take the offset back out), then one fma per row: the block's dot as fp32 times s_w · s_a. Sum order
// per output: blocks in order, whatever MR or R (batch invariant).
template <DType F, int MR>
void packed_group(float* out, int64_t ldc, const int8_t* q, const int32_t* neg_sum128, const float* d,
                  int64_t R, const DecodePack& p, const uint8_t* grp, int64_t col, const Prefetch& pf) {
  const int64_t nb = p.nb;
  // 2 · E2M1 + 128 for the 16 codes (the table holds the doubled values, so the scale is halved).
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(char(128), char(129), char(130), char(131), char(132), char(134), char(136), char(140),
                    char(128), char(127), char(126), char(125), char(124), char(122), char(120), char(116)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 facc[MR];
  for (int m = 0; m < MR; m++) facc[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++, q += R * 32, neg_sum128 += R, d += R) {
    const uint8_t* blk = grp + size_t(b) * p.block_bytes;
    // The packed weights stream front to back; the hardware prefetcher alone left M = 1 at ~15 GB/s.
    pf.block(b);
    __m512i acc[MR];
    for (int m = 0; m < MR; m++) acc[m] = _mm512_set1_epi32(neg_sum128[m]);
    __m512 sc;
    if constexpr (F == DType::Q8_0) {
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        const __m512i w = _mm512_loadu_si512(blk + 64 * j);
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++)
          acc[m] = _mm512_dpbusd_epi32(acc[m], w, _mm512_set1_epi32(load_i32(q + m * 32 + 4 * j)));
      }
      sc = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 512)));
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_loadu_si512(blk + 64 * j);
        const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low4));
        const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
          acc[m] = _mm512_dpbusd_epi32(acc[m], lo, _mm512_set1_epi32(load_i32(q + m * 32 + 4 * j)));
          acc[m] = _mm512_dpbusd_epi32(acc[m], hi, _mm512_set1_epi32(load_i32(q + m * 32 + 16 + 4 * j)));
        }
      }
      const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 256)));
      __m512i bits = _mm512_slli_epi32(e, 23);  // 2^(e-127) for e >= 1; e = 0: 2^-127, a float subnormal
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                   _mm512_set1_epi32(0x00400000));
      sc = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0.5f));
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) {
      const __m512 s = _mm512_mul_ps(sc, _mm512_set1_ps(d[m]));
      facc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m]), s, facc[m]);
    }
  }
  for (int m = 0; m < MR; m++) _mm512_storeu_ps(out + m * ldc + col, facc[m]);
}

// Columns [n0, n1) (multiples of 16) of out[M, N] for the region of M activation rows starting at row r0 of
// `a` (ActBlocksView), expert e. Each group meets all M rows while it is in L1 (8, 4, 2, 1 rows at a time).
template <DType F>
void packed_tile(float* out, int64_t ldc, const ActBlocksView& a, int64_t r0, int64_t M, const DecodePack& p,
                 int64_t e, int64_t n0, int64_t n1) {
  const int passes = row_blocks(M);
  const int8_t* q = a.q + r0 * p.K;
  const int32_t* ns = a.neg_sum128 + r0 * p.nb;
  const float* d = a.d + r0 * p.nb;
  for (int64_t g = n0 / 16; g < n1 / 16; g++) {
    const uint8_t* grp = p.group(e, g);
    int64_t m = 0;
    int pass = 0;
    auto pf = [&]() { return Prefetch(grp, p, passes, pass++); };
    auto rows = [&](auto mr) {
      constexpr int MR = decltype(mr)::value;
      packed_group<F, MR>(out + m * ldc, ldc, q + m * 32, ns + m, d + m, M, p, grp, 16 * g, pf());
      m += MR;
    };
    while (M - m >= 8) rows(std::integral_constant<int, 8>());
    if (M - m >= 4) rows(std::integral_constant<int, 4>());
    if (M - m >= 2) rows(std::integral_constant<int, 2>());
    if (M - m >= 1) rows(std::integral_constant<int, 1>());
  }
}

void packed_tile_any(float* out, int64_t ldc, const ActBlocksView& a, int64_t r0, int64_t M,
                     const DecodePack& p, int64_t e, int64_t n0, int64_t n1) {
  if (p.fmt == DType::Q8_0) return packed_tile<DType::Q8_0>(out, ldc, a, r0, M, p, e, n0, n1);
  packed_tile<DType::MXFP4>(out, ldc, a, r0, M, p, e, n0, n1);
}

// ---- The float kernels over packed weights: BF16 matrices on CPUs where vdpbf16ps is slow, FP8 ones ----
//
// The fp32 streaming kernel takes a bf16 row 32 elements at a time, widens them (a vpmovzxwd and a shift per
// 16) and forms dot products across the lanes, reduced at the end: at 8 and 16 rows it ran its fmas at
// ~45% of two cores' peak on an Intel Xeon (bench/quant_gemm_bench), so the dense bf16 products of a batch-16
// decode step were arithmetic-bound. Over the pack, a 64-byte vector holds one element pair of 16 rows: a
// shift gives the 16 even elements as fp32, an and the 16 odd ones, and each meets a broadcast activation,
// lanes over output columns. A register block is NG groups of 16 columns x MR activation rows of fp32
// accumulators (16 of them; 8 for one row), no reduction at the end. Each output is one chain of fmas over
// k = 0, 1, ..., K - 1 in order, the same whatever NG, MR and M: a row's result depends on its own
// activations and W only (batch invariant).
//
// FP8 (e4m3) the same way, 64 elements a vector: two byte pairs of 16 rows (word r: elements 4q, 4q + 1 of
// row r; word 16 + r: 4q + 2, 4q + 3). Shifting a byte to the top of its word and one more to the right (sign
// copied), bit 14 cleared, gives S.0EEEE.MMM0000000: the fp16 of the e4m3 value times 2^-8, subnormals
// included (an e4m3 subnormal is an fp16 subnormal, which vcvtph2ps widens exactly). Three integer ops and
// two widenings per 32 elements, where the streaming kernel spent 5.5 (the byte-to-word widening and the NaN
// lanes; a matrix holding e4m3 NaN codes keeps that kernel: pack_for_decode leaves it unpacked) and ran one
// row at 21 GB/s, below the memory. Each output times its row's scale (times 2^8) at the end. Decoding to
// fp32 bit patterns directly would need fp32 subnormals for e4m3's, and an fma with a subnormal operand
// took ~100x longer on that Xeon.

// The lines kFloatPackPrefetch bytes ahead of a group's stream go to L1 as it is read (each group is its own
// stream, and NG of them run side by side).
constexpr size_t kFloatPackPrefetch = 2048;

// out[m, 16g + i] for groups g0 .. g0 + NG - 1 of expert e and the MR activation rows at `at` (`at` holds
// them transposed: element k of row m at at[k · ldt + m]; out points at row 0 of the block).
template <DType F, int NG, int MR>
void float_packed_groups(float* out, int64_t ldc, const float* at, int64_t ldt, const DecodePack& p,
                         int64_t e, int64_t g0) {
  static_assert(F == DType::BF16 || F == DType::F8_E4M3, "the float packed kernels take BF16 or FP8 packs");
  const uint8_t* grp[NG];
  for (int g = 0; g < NG; g++) grp[g] = p.group(e, g0 + g);
  __m512 acc[NG][MR];
  for (int g = 0; g < NG; g++)
    for (int m = 0; m < MR; m++) acc[g][m] = _mm512_setzero_ps();
  if constexpr (F == DType::BF16) {
    const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
    const int64_t pairs = p.K / 2;
    // Element 2j of every row at a0, element 2j + 1 at a1: two pointers, so that every broadcast is a fixed
    // offset from one of them (a0 + ldt + m took a register each and spilled).
    const float* a0 = at;
    const float* a1 = at + ldt;
    for (int64_t j = 0; j < pairs; j++, a0 += 2 * ldt, a1 += 2 * ldt) {
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) {
        const uint8_t* v = grp[g] + size_t(j) * 64;
        _mm_prefetch(reinterpret_cast<const char*>(v + kFloatPackPrefetch), _MM_HINT_T0);
        const __m512i w = _mm512_load_si512(v);
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(w, high));
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) acc[g][m] = _mm512_fmadd_ps(even, _mm512_set1_ps(a0[m]), acc[g][m]);
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) acc[g][m] = _mm512_fmadd_ps(odd, _mm512_set1_ps(a1[m]), acc[g][m]);
      }
    }
    for (int g = 0; g < NG; g++)
      for (int m = 0; m < MR; m++) _mm512_storeu_ps(out + m * ldc + 16 * (g0 + g), acc[g][m]);
  } else {
    const __m512i keep = _mm512_set1_epi16(short(0xBF80));  // sign, exponent, 3 mantissa bits
    const int64_t quads = p.K / 4;
    const float* a0 = at;  // elements 4q, 4q + 1, 4q + 2, 4q + 3 of every row (see the bf16 case)
    const float* a1 = at + ldt;
    const float* a2 = at + 2 * ldt;
    const float* a3 = at + 3 * ldt;
    for (int64_t q = 0; q < quads; q++, a0 += 4 * ldt, a1 += 4 * ldt, a2 += 4 * ldt, a3 += 4 * ldt) {
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) {
        const uint8_t* v = grp[g] + size_t(q) * 64;
        _mm_prefetch(reinterpret_cast<const char*>(v + kFloatPackPrefetch), _MM_HINT_T0);
        const __m512i w = _mm512_load_si512(v);
        const __m512i lo = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 1), keep);
        const __m512i hi = _mm512_and_si512(_mm512_srai_epi16(w, 1), keep);
        const __m512 f0 = _mm512_cvtph_ps(_mm512_castsi512_si256(lo));
        const __m512 f1 = _mm512_cvtph_ps(_mm512_castsi512_si256(hi));
        const __m512 f2 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(lo, 1));
        const __m512 f3 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hi, 1));
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
          __m512 x = _mm512_fmadd_ps(f0, _mm512_set1_ps(a0[m]), acc[g][m]);
          x = _mm512_fmadd_ps(f1, _mm512_set1_ps(a1[m]), x);
          x = _mm512_fmadd_ps(f2, _mm512_set1_ps(a2[m]), x);
          acc[g][m] = _mm512_fmadd_ps(f3, _mm512_set1_ps(a3[m]), x);
        }
      }
    }
    for (int g = 0; g < NG; g++) {
      const __m512 scale = _mm512_loadu_ps(p.row_scale.data() + e * p.N + 16 * (g0 + g));
      for (int m = 0; m < MR; m++)
        _mm512_storeu_ps(out + m * ldc + 16 * (g0 + g), _mm512_mul_ps(acc[g][m], scale));
    }
  }
}

// Groups [g0, g1) for MR rows: NG at a time, the rest one by one.
template <DType F, int NG, int MR>
void float_packed_run(float* out, int64_t ldc, const float* at, int64_t ldt, const DecodePack& p, int64_t e,
                      int64_t g0, int64_t g1) {
  int64_t g = g0;
  for (; g + NG <= g1; g += NG) float_packed_groups<F, NG, MR>(out, ldc, at, ldt, p, e, g);
  for (; g < g1; g++) float_packed_groups<F, 1, MR>(out, ldc, at, ldt, p, e, g);
}

// The BF16 packs' blocking, shared by the float packed and the packed bf16 dot kernels: columns [n0, n1)
// (multiples of 16) in slices of groups, and in each slice the M rows in blocks of 16, 8, 4, 2 and 1 with 1,
// 2, 4, 8 and 8 groups side by side (16 accumulators each): run(ng, mr, m, s0, s1) computes rows m .. m + MR
// - 1 of groups [s0, s1), NG at a time (ng, mr: std::integral_constant). One slice of all the columns when
// the rows are one block (1, 2, 4, 8 or 16), else slices of 8 groups that every block after the first finds
// in L2.
template <class Run>
void bf16_row_blocks(int64_t M, int64_t n0, int64_t n1, Run run) {
  using std::integral_constant;
  const bool one_pass = M <= 16 && (M & (M - 1)) == 0;
  const int64_t slice = one_pass ? (n1 - n0) / 16 : 8;
  for (int64_t s0 = n0 / 16; s0 < n1 / 16; s0 += slice) {
    const int64_t s1 = std::min(n1 / 16, s0 + slice);
    for (int64_t m = 0; m < M;) {
      const int64_t left = M - m;
      if (left >= 16) {
        run(integral_constant<int, 1>(), integral_constant<int, 16>(), m, s0, s1), m += 16;
      } else if (left >= 8) {
        run(integral_constant<int, 2>(), integral_constant<int, 8>(), m, s0, s1), m += 8;
      } else if (left >= 4) {
        run(integral_constant<int, 4>(), integral_constant<int, 4>(), m, s0, s1), m += 4;
      } else if (left >= 2) {
        run(integral_constant<int, 8>(), integral_constant<int, 2>(), m, s0, s1), m += 2;
      } else {
        run(integral_constant<int, 8>(), integral_constant<int, 1>(), m, s0, s1), m += 1;
      }
    }
  }
}

// Columns [n0, n1) (multiples of 16) of out[M, N] for the M activation rows of `at` ([K, M], transposed),
// expert e. BF16 rows go in blocks of 16, 8, 4, 2 and 1 (16 accumulators each: 1, 2, 4, 8 and 8 groups side
// by side). FP8 rows go in blocks of 8 and then one block of the rest (1 to 7 rows, 4, 4, 4, 2, 2, 2 and 2
// groups): its widening costs more than a row's fmas, so each pass widens the weights once for as many rows
// as registers allow (3 rows as 2 + 1 ran ~1.5x the conversions). With several blocks, the columns go in
// slices of 8 groups (a few hundred KB) that every block after the first finds in L2.
template <DType F>
void float_packed_tile(float* out, int64_t ldc, const float* at, int64_t M, const DecodePack& p, int64_t e,
                       int64_t n0, int64_t n1) {
  if constexpr (F == DType::BF16) {
    bf16_row_blocks(M, n0, n1, [&](auto ng, auto mr, int64_t m, int64_t s0, int64_t s1) {
      float_packed_run<F, decltype(ng)::value, decltype(mr)::value>(out + m * ldc, ldc, at + m, M, p, e, s0,
                                                                    s1);
    });
  } else {
    const int64_t slice = M <= 8 ? (n1 - n0) / 16 : 8;  // one block of rows: one slice of all the columns
    for (int64_t s0 = n0 / 16; s0 < n1 / 16; s0 += slice) {
      const int64_t s1 = std::min(n1 / 16, s0 + slice);
      for (int64_t m = 0; m < M; m += 8) {
        float* o = out + m * ldc;
        const float* a = at + m;
        switch (std::min<int64_t>(M - m, 8)) {
          case 8:
            float_packed_run<F, 1, 8>(o, ldc, a, M, p, e, s0, s1);
            break;
          case 7:
            float_packed_run<F, 2, 7>(o, ldc, a, M, p, e, s0, s1);
            break;
          case 6:
            float_packed_run<F, 2, 6>(o, ldc, a, M, p, e, s0, s1);
            break;
          case 5:
            float_packed_run<F, 2, 5>(o, ldc, a, M, p, e, s0, s1);
            break;
          case 4:
            float_packed_run<F, 2, 4>(o, ldc, a, M, p, e, s0, s1);
            break;
          case 3:
            float_packed_run<F, 4, 3>(o, ldc, a, M, p, e, s0, s1);
            break;
          case 2:
            float_packed_run<F, 4, 2>(o, ldc, a, M, p, e, s0, s1);
            break;
          default:
            float_packed_run<F, 4, 1>(o, ldc, a, M, p, e, s0, s1);
            break;
        }
      }
    }
  }
}

void float_packed_tile_any(float* out, int64_t ldc, const float* at, int64_t M, const DecodePack& p,
                           int64_t e, int64_t n0, int64_t n1) {
  if (p.fmt == DType::BF16) return float_packed_tile<DType::BF16>(out, ldc, at, M, p, e, n0, n1);
  float_packed_tile<DType::F8_E4M3>(out, ldc, at, M, p, e, n0, n1);
}

// in[M, K] transposed into at[K, M] (a column of activations per element), written in k order (each row's
// line serves 16 k from L1).
void transpose_activations(float* at, const float* in, int64_t M, int64_t K) {
  for (int64_t k = 0; k < K; k++)
    for (int64_t m = 0; m < M; m++) at[k * M + m] = in[m * K + k];
}

// Rows [n0, n0 + rows) of expert e dequantized from the pack into out32 or out16 ([rows, K]): bit for bit
// what dequant_rows gives from the checkpoint's own layout (the same element value times the same scale,
// rounded once), so prefill never needs the original pages once a pack exists.
template <DType F>
void dequant_packed_rows(float* out32, uint16_t* out16, const DecodePack& p, int64_t e, int64_t n0,
                         int64_t rows) {
  const int64_t K = p.K;
  const __m256i q_offsets = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
  const __m128i p_offsets = _mm_setr_epi32(0, 64, 128, 192);
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                      -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  const __m512i pair_offsets =
      _mm512_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960);
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = n0 + r, lane = n % 16;
    const uint8_t* grp = p.group(e, n / 16);
    for (int64_t b = 0; b < p.nb; b++) {
      const uint8_t* blk = grp + size_t(b) * p.block_bytes;
      if constexpr (F == DType::BF16) {
        // The row's 16 element pairs, one dword per 64-byte vector: the 32 bf16 values in order.
        const __m512i v =
            _mm512_i32gather_epi32(pair_offsets, reinterpret_cast<const int*>(blk + 4 * lane), 1);
        const int64_t at = r * K + b * 32;
        if (out16) {
          _mm512_storeu_si512(out16 + at, v);
        } else {
          const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
          const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
          _mm512_storeu_ps(out32 + at, _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)));
          _mm512_storeu_ps(out32 + at + 16, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
        }
        continue;
      }
      __m512 lo, hi;
      float d;
      if constexpr (F == DType::F8_E4M3) {
        // The row's 32 codes back in order, then exactly dequant_rows' steps (its NaN lanes included).
        alignas(32) uint8_t codes[32];
        for (int q = 0; q < 8; q++) {
          std::memcpy(codes + 4 * q, blk + q * 64 + 2 * lane, 2);
          std::memcpy(codes + 4 * q + 2, blk + q * 64 + 32 + 2 * lane, 2);
        }
        load_block<F>(codes, 0, &lo, &hi);
        d = 1.0f * p.row_scale[size_t(e * p.N + n)];
      } else if constexpr (F == DType::Q8_0) {
        // The row's 8 dwords (4 elements each), one per 64-byte vector; back from u8 = w + 128 to int8.
        const __m256i v = _mm256_xor_si256(
            _mm256_i32gather_epi32(reinterpret_cast<const int*>(blk + 4 * lane), q_offsets, 1),
            _mm256_set1_epi8(char(0x80)));
        lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
        hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
        uint16_t h;
        std::memcpy(&h, blk + 512 + 2 * lane, 2);
        d = f16_to_f32(h);
      } else {
        // 4 dwords of nibble pairs: low nibbles are elements 0..15, high nibbles 16..31.
        const __m512i bytes = _mm512_cvtepu8_epi32(
            _mm_i32gather_epi32(reinterpret_cast<const int*>(blk + 4 * lane), p_offsets, 1));
        lo = _mm512_permutexvar_ps(bytes, table);
        hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
        d = e8m0_to_f32(blk[256 + lane]);
      }
      const __m512 dv = _mm512_set1_ps(d);
      lo = _mm512_mul_ps(lo, dv);
      hi = _mm512_mul_ps(hi, dv);
      const int64_t at = r * K + b * 32;
      if (out32) {
        _mm512_storeu_ps(out32 + at, lo);
        _mm512_storeu_ps(out32 + at + 16, hi);
      } else {
#if defined(__AVX512BF16__)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out16 + at), (__m256i)_mm512_cvtneps_pbh(lo));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out16 + at + 16), (__m256i)_mm512_cvtneps_pbh(hi));
#else
        alignas(64) float t[32];
        _mm512_store_ps(t, lo);
        _mm512_store_ps(t + 16, hi);
        for (int j = 0; j < 32; j++) out16[at + j] = f32_to_bf16(t[j]);
#endif
      }
    }
  }
}

#endif  // __AVX512VNNI__

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define ZAYA_DECODE_BF16_DOT 1

// ---- The bf16 dot-product kernel: BF16 and FP8 weights, activations rounded to bf16 (quant_gemm.h) ----

// The bf16 bits of every e4m3 magnitude code S=0.EEEE.MMM (exact: bf16 has e4m3's every value):
// (E + 120).MMM0000 for E >= 1, the subnormal M · 2^-9 for E = 0 (as a normal bf16: vdpbf16ps would flush a
// bf16 subnormal to zero), and 0x7FC0 (NaN) for the NaN code 0.1111.111. Four 32-entry vectors, for
// vpermi2w.
struct E4m3Bf16Table {
  alignas(64) uint16_t v[128];
  E4m3Bf16Table() {
    for (int c = 0; c < 128; c++) {
      const int e = c >> 3, m = c & 7;
      if (c == 127) {
        v[c] = 0x7FC0;
      } else if (e == 0) {
        v[c] = m == 0 ? 0 : f32_to_bf16(std::ldexp(float(m), -9));  // exact: 3 mantissa bits
      } else {
        v[c] = uint16_t(((e + 120) << 7) | (m << 4));
      }
    }
  }
};

// 32 e4m3 values as bf16, exactly: the magnitude looked up in the 128-entry table (two two-register
// permutes, bit 6 choosing between them), the sign moved to bit 15. ~7 instructions per 32 weights.
inline __m512i e4m3_to_bf16(const uint8_t* p) {
  static const E4m3Bf16Table table;
  const __m512i t0 = _mm512_load_si512(table.v), t1 = _mm512_load_si512(table.v + 32);
  const __m512i t2 = _mm512_load_si512(table.v + 64), t3 = _mm512_load_si512(table.v + 96);
  const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i lo = _mm512_permutex2var_epi16(t0, x, t1);  // reads index bits [5:0]
  const __m512i hi = _mm512_permutex2var_epi16(t2, x, t3);
  const __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(x, _mm512_set1_epi16(0x40)), lo, hi);
  // v | ((x << 8) & 0x8000): the sign bit.
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(x, 8), _mm512_set1_epi16(int16_t(0x8000)), 0xF8);
}

// out[m, r] (m < MR, r < NR; out at row 0, column 0 of the block) = row_scale[r] · Σ_k a[m, k] · w[r][k]:
// vdpbf16ps lanes over k in 32-element steps, then lane_sum. Per output: lane l over the pairs
// (32j + 2l, 32j + 2l + 1), j increasing, then the fixed tree: gemm_rows.h's bf16 dot form exactly, so with
// BF16 weights a result equals gemm()'s batch-invariant one bit for bit, and it never depends on MR, NR or
// the other rows. `prefetch` (or null): the rows this block's weights are followed by, fetched as these
// stream (the first activation block of a group only).
template <int NR, int MR>
void dot16_block(float* out, int64_t ldc, const uint16_t* a, int64_t lda, const uint16_t* const* w,
                 const uint16_t* const* prefetch, const float* row_scale, int64_t K) {
  __m512 acc[NR][MR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) acc[r][m] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    __m512bh wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(prefetch[r] + k), _MM_HINT_T0);
      wv[r] = (__m512bh)_mm512_loadu_si512(w[r] + k);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a + m * lda + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], av, wv[r]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) out[m * ldc + r] = lane_sum(acc[r][m]) * row_scale[r];
}

// NR weight rows against activation rows [0, M), 6 (the most the registers hold beside 4 x 6 accumulators)
// at a time.
template <int NR>
void dot16_rows(float* out, int64_t ldc, const uint16_t* a, int64_t M, const uint16_t* const* w,
                const uint16_t* const* prefetch, const float* row_scale, int64_t K) {
  for (int64_t m = 0; m < M;) {
    const uint16_t* const* pf = m == 0 ? prefetch : nullptr;
    float* o = out + m * ldc;
    const uint16_t* am = a + m * K;
    switch (std::min<int64_t>(6, M - m)) {
      case 1:
        dot16_block<NR, 1>(o, ldc, am, K, w, pf, row_scale, K), m += 1;
        break;
      case 2:
        dot16_block<NR, 2>(o, ldc, am, K, w, pf, row_scale, K), m += 2;
        break;
      case 3:
        dot16_block<NR, 3>(o, ldc, am, K, w, pf, row_scale, K), m += 3;
        break;
      case 4:
        dot16_block<NR, 4>(o, ldc, am, K, w, pf, row_scale, K), m += 4;
        break;
      case 5:
        dot16_block<NR, 5>(o, ldc, am, K, w, pf, row_scale, K), m += 5;
        break;
      default:
        dot16_block<NR, 6>(o, ldc, am, K, w, pf, row_scale, K), m += 6;
        break;
    }
  }
}

// Columns [n0, n1) of out[M, N] from the bf16 activations a[M, K] (row stride K) and W's rows, 4 weight rows
// at a time: BF16 rows are read in place (the next 4 prefetched while the first activation block passes);
// FP8 rows are first widened to bf16 into a small buffer that every activation block then reads from L1,
// and each result is multiplied by its row's scale.
template <DType F>
void dot16_tile(float* out, int64_t ldc, const uint16_t* a, int64_t M, const QMat& w, int64_t n0,
                int64_t n1) {
  constexpr int NR = 4;
  const int64_t K = w.K;
  // One BF16 activation row: the weight rows one after another, each front to back, so a tile is a single
  // sequential stream (what the hardware prefetcher follows best; interleaving 4 rows and prefetching the
  // next 4 made 8 streams). The sums are the same (one chain per output), so the bits are too. One-row
  // products of the 8B shapes: +7-21% (o_proj, q/k/v; interleaved A/B, Zen 5), the 1 GB head unchanged.
  if constexpr (F == DType::BF16) {
    if (M == 1) {
      const float one = 1.0f;
      for (int64_t n = n0; n < n1; n++) {
        const uint16_t* row = reinterpret_cast<const uint16_t*>(w.q + size_t(n) * w.row_bytes);
        dot16_rows<1>(out + n, ldc, a, M, &row, nullptr, &one, K);
      }
      return;
    }
  }
  thread_local std::vector<uint16_t> wide;  // FP8: [NR, K] bf16
  if constexpr (F == DType::F8_E4M3) wide.resize(size_t(NR * K));
  for (int64_t n = n0; n < n1; n += NR) {
    const int nr = int(std::min<int64_t>(NR, n1 - n));
    const uint16_t* rows[NR];
    const uint16_t* next[NR];
    float scale[NR];
    for (int r = 0; r < nr; r++) {
      const uint8_t* src = w.q + size_t(n + r) * w.row_bytes;
      if constexpr (F == DType::BF16) {
        rows[r] = reinterpret_cast<const uint16_t*>(src);
        next[r] = rows[r] + NR * K;  // prefetching past the matrix never faults
        scale[r] = 1.0f;
      } else {
        uint16_t* dst = wide.data() + r * K;
        for (int64_t k = 0; k < K; k += 32) {
          _mm_prefetch(reinterpret_cast<const char*>(src + NR * w.row_bytes + k), _MM_HINT_T0);
          _mm512_storeu_si512(dst + k, e4m3_to_bf16(src + k));
        }
        rows[r] = dst;
        scale[r] = static_cast<const float*>(w.scales)[(n + r) * w.scales_per_row];
      }
    }
    const uint16_t* const* pf = F == DType::BF16 ? next : nullptr;
    if (nr == NR) {
      dot16_rows<NR>(out + n, ldc, a, M, rows, pf, scale, K);
    } else {
      for (int r = 0; r < nr; r++)
        dot16_rows<1>(out + n + r, ldc, a, M, rows + r, pf ? pf + r : nullptr, scale + r, K);
    }
  }
}

void dot16_tile_any(float* out, int64_t ldc, const uint16_t* a, int64_t M, const QMat& w, int64_t n0,
                    int64_t n1) {
  if (w.fmt == DType::BF16) return dot16_tile<DType::BF16>(out, ldc, a, M, w, n0, n1);
  dot16_tile<DType::F8_E4M3>(out, ldc, a, M, w, n0, n1);
}

#if defined(ZAYA_DECODE_VNNI)
// ---- The bf16 dot kernel over the bf16 pack (full-width AVX-512: Zen 5) ----
//
// The pack's vector j holds elements (2j, 2j + 1) of 16 rows as one dword: exactly a vdpbf16ps operand whose
// lane r meets the broadcast activation pair (a[2j], a[2j + 1]) of one row. One instruction per vector and
// activation row, where the fp32 packed kernel spends a shift or an and and two fmas: at 16 rows that kernel
// is fma-bound (the ZAYA1-8B head at 16 rows ~20 GB/s on Zen 5). Activations rounded to bf16 (nearest even)
// as the dot kernel rounds them. Each output is one chain of vdpbf16ps over the pairs in order, the same
// whatever NG, MR and M (batch invariant); the sums differ from dot16's lane-then-tree order.

// out[m, 16g + i] for groups g0 .. g0 + NG - 1 of expert e and the MR activation rows of `ap`: the bf16
// activation pairs transposed, pair j of row m at ap[j · ldt + m].
template <int NG, int MR>
void bf16_packed_dot_groups(float* out, int64_t ldc, const uint32_t* ap, int64_t ldt, const DecodePack& p,
                            int64_t e, int64_t g0) {
  // Prefetch distance: with 8+ rows each 64-byte vector meets 8-16 vdpbf16ps, so the stream advances slowly
  // and 2 kB ahead is less than a memory latency's worth of it; with fewer rows the stream is fast and a
  // longer distance fetches too early. Zen 5, [4096, 2048] from memory, 2 threads, in-process randomly
  // interleaved variants (two runs, medians of 6 and 8): 16 rows 22.5 / 25.3 GB/s at 2 kB, 25.7 / 31.1 at
  // 8 kB; 8 rows 38.8 -> 40.6; 4 rows 51.8 -> 44.6 and 1 row 44.6 / 50.4 -> 40.1 / 48.5 (so those keep 2 kB).
  constexpr size_t kPrefetch = MR >= 8 ? 8192 : kFloatPackPrefetch;
  const uint8_t* grp[NG];
  for (int g = 0; g < NG; g++) grp[g] = p.group(e, g0 + g);
  __m512 acc[NG][MR];
  for (int g = 0; g < NG; g++)
    for (int m = 0; m < MR; m++) acc[g][m] = _mm512_setzero_ps();
  const int64_t pairs = p.K / 2;
  const uint32_t* a = ap;
  for (int64_t j = 0; j < pairs; j++, a += ldt) {
#pragma GCC unroll 8
    for (int g = 0; g < NG; g++) {
      const uint8_t* v = grp[g] + size_t(j) * 64;
      _mm_prefetch(reinterpret_cast<const char*>(v + kPrefetch), _MM_HINT_T0);
      const __m512bh w = (__m512bh)_mm512_load_si512(v);
#pragma GCC unroll 16
      for (int m = 0; m < MR; m++)
        acc[g][m] = _mm512_dpbf16_ps(acc[g][m], w, (__m512bh)_mm512_set1_epi32(int(a[m])));
    }
  }
  for (int g = 0; g < NG; g++)
    for (int m = 0; m < MR; m++) _mm512_storeu_ps(out + m * ldc + 16 * (g0 + g), acc[g][m]);
}

template <int NG, int MR>
void bf16_packed_dot_run(float* out, int64_t ldc, const uint32_t* ap, int64_t ldt, const DecodePack& p,
                         int64_t e, int64_t g0, int64_t g1) {
  int64_t g = g0;
  for (; g + NG <= g1; g += NG) bf16_packed_dot_groups<NG, MR>(out, ldc, ap, ldt, p, e, g);
  for (; g < g1; g++) bf16_packed_dot_groups<1, MR>(out, ldc, ap, ldt, p, e, g);
}

// Columns [n0, n1) (multiples of 16) of out[M, N] for the M rows of `ap` ([K / 2, M] bf16 pairs), expert e,
// blocked as the float packed kernel's BF16 (bf16_row_blocks).
void bf16_packed_dot_tile(float* out, int64_t ldc, const uint32_t* ap, int64_t M, const DecodePack& p,
                          int64_t e, int64_t n0, int64_t n1) {
  bf16_row_blocks(M, n0, n1, [&](auto ng, auto mr, int64_t m, int64_t s0, int64_t s1) {
    bf16_packed_dot_run<decltype(ng)::value, decltype(mr)::value>(out + m * ldc, ldc, ap + m, M, p, e, s0,
                                                                  s1);
  });
}

// in[M, K] rounded to bf16 (nearest even) and transposed into pairs: ap[j · M + m] = bf16(in[m, 2j]) |
// bf16(in[m, 2j + 1]) << 16.
// Written in j order (each row's line serves 16 pairs from L1), as transpose_activations.
void bf16_pairs_transposed(uint32_t* ap, const float* in, int64_t M, int64_t K) {
  thread_local std::vector<uint16_t> rows;
  rows.resize(size_t(M * K));
  convert_f32_to_bf16(rows.data(), in, M * K);
  const uint32_t* pairs = reinterpret_cast<const uint32_t*>(rows.data());  // little-endian: 2j low, 2j+1 high
  for (int64_t j = 0; j < K / 2; j++)
    for (int64_t m = 0; m < M; m++) ap[j * M + m] = pairs[m * (K / 2) + j];
}
#endif  // ZAYA_DECODE_VNNI

#endif  // ZAYA_DECODE_BF16_DOT

// Rows [n0, n1) of out[M, N] (stride ldc) from a[M, K] (fp32; MXFP4: deinterleaved when AVX-512).
void stream_tile_any(float* out, int64_t ldc, const float* a, int64_t lda, int64_t M, const QMat& w,
                     int64_t n0, int64_t n1, bool avx2 = false) {
#if defined(ZAYA_STREAM_AVX2)
#if defined(__AVX512F__)
  const bool take8 = avx2;  // AVX-512 builds: only when asked (tests, benchmarks)
#else
  const bool take8 = true;
#endif
  if (take8 && stream8_takes(w)) return stream_tile8_any(out, ldc, a, lda, M, w, n0, n1);
#else
  ZAYA_CHECK(!avx2, "quant_linear_forward: this build has no AVX2 streaming kernel");
#endif
#if defined(__AVX512F__)
  if (w.K % 32 == 0) {
    switch (w.fmt) {
      case DType::Q8_0:
        return stream_tile<DType::Q8_0>(out, ldc, a, lda, M, w, n0, n1);
      case DType::MXFP4:
        return stream_tile<DType::MXFP4>(out, ldc, a, lda, M, w, n0, n1);
      case DType::F8_E4M3:
        return stream_tile<DType::F8_E4M3>(out, ldc, a, lda, M, w, n0, n1);
      case DType::BF16:
        return stream_tile<DType::BF16>(out, ldc, a, lda, M, w, n0, n1);
      default:
        break;
    }
  }
#endif
  // Portable path (and FP8 rows whose K is not a multiple of 32): dequantize a row, fp32 dot products.
  Tensor view = Tensor::view(w.fmt, {w.N, w.K}, const_cast<uint8_t*>(w.q), nullptr);
  if (w.scales) {
    Tensor sc = Tensor::view(quant_scales_dtype(w.fmt), quant_scales_shape(w.fmt, view.shape),
                             const_cast<void*>(w.scales), nullptr);
    view.scales = std::make_shared<const Tensor>(sc);
  }
  std::vector<float> wrow(size_t(w.K));
  for (int64_t n = n0; n < n1; n++) {
    dequantize_row(wrow.data(), view, n);
    for (int64_t m = 0; m < M; m++) {
      const float* am = a + m * lda;
      float acc = 0.0f;
      for (int64_t k = 0; k < w.K; k++) acc += wrow[size_t(k)] * am[k];
      out[m * ldc + n] = acc;
    }
  }
}

// The activations the streaming kernel reads for W's format, row m at *lda · m: `in` itself, or the MXFP4
// deinterleaved copy.
const float* stream_input(const float* in, int64_t M, int64_t K, DType fmt, std::vector<float>* buf,
                          int64_t* lda) {
  *lda = K;
#if defined(__AVX512F__) || defined(ZAYA_STREAM_AVX2)
  if (fmt == DType::MXFP4 && K % 32 == 0) {
    buf->resize(size_t(M * K));
    deinterleave_blocks(buf->data(), K, in, M, K);
    return buf->data();
  }
#endif
  (void)M, (void)fmt, (void)buf;
  return in;
}

struct Tile {
  int64_t expert, n0, n1;
};

// Output rows per work item: about kTileBytes of weights, in whole blocks of 64 rows (the kernels' widest
// register blocks; all of N when N is smaller). run_tiles gives each thread a contiguous share of the items
// and lets a thread that finishes first take items from the back of another's share, so items can be small
// (the threads end within one item of each other) while each thread still reads one stream. With dynamic
// scheduling, 2 large items a thread left the threads' ends apart by 11-18% of a batch-1 decode step's
// threaded product time (ZAYA1-8B, Q8_0 everywhere, Zen 5; 4% with shares), and 8 a thread interleaved the
// threads' reads (4-15% slower). docs/quantization.md, "Shares instead of dynamic items".
constexpr size_t kTileBytes = size_t(192) << 10;

int64_t tile_rows(int64_t N, size_t row_bytes) {
  if (N <= 64) return N;
  const int64_t want = int64_t(double(kTileBytes) / double(std::max<size_t>(row_bytes, 1)) / 64.0 + 0.5) * 64;
  return std::min(N, std::max<int64_t>(64, want));
}

// The work items of one [N, K] matrix (row_bytes a row): column tiles of tile_rows rows.
std::vector<Tile> matrix_tiles(int64_t N, size_t row_bytes) {
  std::vector<Tile> tiles;
  const int64_t tr = tile_rows(N, row_bytes);
  for (int64_t n0 = 0; n0 < N; n0 += tr) tiles.push_back({0, n0, std::min(N, n0 + tr)});
  return tiles;
}

// The work items of a grouped call: every (expert, column tile) pair of the experts given, expert by expert
// (each expert's tiles are consecutive memory).
std::vector<Tile> expert_tiles(const std::vector<int64_t>& experts, int64_t N, size_t row_bytes) {
  std::vector<Tile> tiles;
  const int64_t tr = tile_rows(N, row_bytes);
  for (int64_t e : experts)
    for (int64_t n0 = 0; n0 < N; n0 += tr) tiles.push_back({e, n0, std::min(N, n0 + tr)});
  return tiles;
}

// Runs tiles over the threads (parallel_for_shares: a contiguous share each, the rest taken from the back of
// the others' shares; experts differ in rows); the first exception is carried out.
// A product that reads less than this stays on the calling thread: waking the pool costs more (a decode
// step of ZAYA1-8B has 120 router products of 128 kB or less; 3.5 vs 11.7 ms a step with them threaded).
constexpr size_t kThreadedMinBytes = size_t(512) << 10;

template <typename Fn>
void run_tiles(const std::vector<Tile>& tiles, size_t bytes, Fn&& fn) {
  const int threads = threads_here();
  if (threads <= 1 || tiles.size() <= 1 || bytes < kThreadedMinBytes) {
    for (const Tile& t : tiles) fn(t);
    return;
  }
  parallel_for_shares(tiles.size(), threads, [&](size_t i, int) { fn(tiles[i]); });
}

#if defined(__AVX512F__) || defined(ZAYA_STREAM_AVX2)
// Rows of W dequantized on this build's widest vectors: dequant_rows (AVX-512 builds) or dequant_rows8 (AVX2
// without AVX-512); the same values either way.
template <DType F>
void dequant_rows_simd(float* out32, uint16_t* out16, const QMat& w, int64_t n0, int64_t rows) {
#if defined(__AVX512F__)
  dequant_rows<F>(out32, out16, w, n0, rows);
#else
  dequant_rows8<F>(out32, out16, w, n0, rows);
#endif
}
#endif

// Rows [n0, n0 + rows) of W's expert `expert` into out32 or out16 ([rows, K]), rows spread over the threads.
void dequant_tile(float* out32, uint16_t* out16, const Tensor& W, int64_t expert, int64_t n0, int64_t rows) {
  const QMat w = qmat(W, expert);
  const int threads = threads_here();
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows >= 64)
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t nr = std::min<int64_t>(16, rows - r0);
    float* o32 = out32 ? out32 + r0 * w.K : nullptr;
    uint16_t* o16 = out16 ? out16 + r0 * w.K : nullptr;
#if defined(ZAYA_DECODE_VNNI)
    if (const DecodePack* p = decode_pack_of(W)) {
      if (p->fmt == DType::BF16)
        dequant_packed_rows<DType::BF16>(o32, o16, *p, expert, n0 + r0, nr);
      else if (p->fmt == DType::Q8_0)
        dequant_packed_rows<DType::Q8_0>(o32, o16, *p, expert, n0 + r0, nr);
      else if (p->fmt == DType::MXFP4)
        dequant_packed_rows<DType::MXFP4>(o32, o16, *p, expert, n0 + r0, nr);
      else
        dequant_packed_rows<DType::F8_E4M3>(o32, o16, *p, expert, n0 + r0, nr);
      continue;
    }
#endif
#if defined(__AVX512F__) || defined(ZAYA_STREAM_AVX2)
    if (w.K % 32 == 0) {
      switch (w.fmt) {
        case DType::Q8_0:
          dequant_rows_simd<DType::Q8_0>(o32, o16, w, n0 + r0, nr);
          continue;
        case DType::MXFP4:
          dequant_rows_simd<DType::MXFP4>(o32, o16, w, n0 + r0, nr);
          continue;
        case DType::F8_E4M3:
          dequant_rows_simd<DType::F8_E4M3>(o32, o16, w, n0 + r0, nr);
          continue;
        default:
          break;
      }
    }
#endif
    const int64_t row0 = expert * w.N + n0 + r0;
    if (o16) {
      dequantize_rows_bf16(o16, W, row0, nr);
    } else {
      for (int64_t r = 0; r < nr; r++) dequantize_row(o32 + r * w.K, W, row0 + r);
    }
  }
}

// out[M, N] = in · W[e]ᵀ through a GEMM over tiles of W dequantized into `tile` (F32 or BF16).
void dequant_gemm(float* out, int64_t ldc, const float* in, int64_t M, const Tensor& W, int64_t expert,
                  DType tile) {
  ZAYA_CHECK(tile == DType::F32 || tile == DType::BF16, "quantized weights dequantize to F32 or BF16, not ",
             dtype_name(tile));
  const int64_t N = W.dim(-2), K = W.dim(-1);
  const int64_t chunk = std::min<int64_t>(N, std::max<int64_t>(64, (int64_t(8) << 20) / (4 * K)));
  thread_local std::vector<uint16_t> tile_bf16;
  thread_local std::vector<float> tile_f32;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t rows = std::min(chunk, N - n0);
    MatRef b{nullptr, tile, K, /*trans=*/true};
    if (tile == DType::BF16) {
      tile_bf16.resize(size_t(chunk * K));
      dequant_tile(nullptr, tile_bf16.data(), W, expert, n0, rows);
      b.data = tile_bf16.data();
    } else {
      tile_f32.resize(size_t(chunk * K));
      dequant_tile(tile_f32.data(), nullptr, W, expert, n0, rows);
      b.data = tile_f32.data();
    }
    gemm(M, rows, K, 1.0f, mat(in, K), b, 0.0f, out + n0, ldc);
  }
}

// Many rows: a bf16 weight goes to gemm() as it is, a quantized one through dequantized tiles; so does a
// packed 3-D bf16 one (its source pages are released: pack_for_decode), into bf16 tiles, the same values.
void many_rows(float* out, int64_t ldc, const float* in, int64_t M, const Tensor& W, int64_t expert,
               DType tile) {
  if (W.dtype == DType::BF16 && W.ndim() == 3 && W.decode_pack) {
    dequant_gemm(out, ldc, in, M, W, expert, DType::BF16);
    return;
  }
  if (W.dtype == DType::BF16) {
    const int64_t N = W.dim(-2), K = W.dim(-1);
    MatRef b{static_cast<const uint16_t*>(W.data) + expert * N * K, DType::BF16, K, /*trans=*/true};
    gemm(M, N, K, 1.0f, mat(in, K), b, 0.0f, out, ldc);
    return;
  }
  dequant_gemm(out, ldc, in, M, W, expert, tile);
}

// Whether a streamed product of M rows takes the bf16 dot kernel: BF16 or FP8 weights in whole blocks of 32,
// a bf16-compute model (its prefill rounds the activations to bf16 too), a CPU where vdpbf16ps outruns fp32
// fmas (core/cpu_info.h), and enough rows that the fp32 kernel's fmas, not memory, set its pace. In gemm's
// batch-invariant mode every M takes the same kernel, so that a row's result never depends on the batch.
bool takes_bf16_dot(DType fmt, int64_t M, int64_t K, DType tile) {
#if defined(ZAYA_DECODE_BF16_DOT)
  return (fmt == DType::BF16 || fmt == DType::F8_E4M3) && K % 32 == 0 && tile == DType::BF16 &&
         (M >= bf16_dot_min_rows(fmt) || gemm_batch_invariant()) && cpu_fast_bf16_dot();
#else
  (void)fmt, (void)M, (void)K, (void)tile;
  return false;
#endif
}

// Whether decode's streamed product takes the AVX2 int8 kernel: Q8_0 / MXFP4 weights in whole blocks, in a
// build whose fastest kernel for them it is (AVX2 without AVX-512: AMD Zen 3, Intel before Skylake-SP).
bool takes_int8_avx2(const QMat& w) {
#if defined(ZAYA_STREAM_AVX2) && !defined(__AVX512F__)
  return (w.fmt == DType::Q8_0 || w.fmt == DType::MXFP4) && w.K % 32 == 0 && quant_int8_activations();
#else
  (void)w;
  return false;
#endif
}

// out = in · W[e]ᵀ on the AVX2 int8 kernel for the tiles given: rows [offsets[e], offsets[e + 1]) of in and
// out for a tile of expert e (a single matrix: expert 0, offsets {0, M}); the activations deinterleaved
// (MXFP4) and quantized once for the whole call.
void int8_avx2_tiles(float* out, int64_t ldc, const float* in, int64_t T, const Tensor& W,
                     const std::vector<Tile>& tiles, size_t bytes, const int64_t* offsets) {
#if defined(ZAYA_STREAM_AVX2)
  const int64_t K = W.dim(-1);
  ZAYA_CHECK(
      (W.dtype == DType::Q8_0 || W.dtype == DType::MXFP4) && K % 32 == 0,
      "quant_linear_forward: the int8 AVX2 kernel takes Q8_0 or MXFP4 weights with K a multiple of 32, got ",
      dtype_name(W.dtype), " K = ", K);
  thread_local std::vector<float> abuf;
  thread_local ActQ8 aq_here;  // the calling thread's; a lambda naming a thread_local reads its own thread's
  int64_t lda = 0;
  const float* a = stream_input(in, T, K, W.dtype, &abuf, &lda);
  quantize_activations(&aq_here, a, T, K);
  const ActQ8& aq = aq_here;
  run_tiles(tiles, bytes, [&](const Tile& t) {
    const int64_t r0 = offsets[t.expert], rows = offsets[t.expert + 1] - r0;
    int8_tile8_any(out + r0 * ldc, ldc, aq, r0, rows, qmat(W, t.expert), t.n0, t.n1);
  });
#else
  (void)out, (void)ldc, (void)in, (void)T, (void)W, (void)tiles, (void)bytes, (void)offsets;
  ZAYA_CHECK(false, "quant_linear_forward: this build has no AVX2 int8 kernel");
#endif
}

// in[M, K] rounded to bf16 (nearest even) into buf; returns its data.
[[maybe_unused]] const uint16_t* bf16_activations(const float* in, int64_t M, int64_t K,
                                                  std::vector<uint16_t>* buf) {
  buf->resize(size_t(M * K));
  convert_f32_to_bf16(buf->data(), in, M * K);
  return buf->data();
}

void check_weight(const Tensor& W, int rank, const char* what) {
  if (W.dtype == DType::BF16) {
    ZAYA_CHECK(W.ndim() == rank, what, ": expected a ", rank, "-D weight, got ", shape_str(W.shape));
    return;
  }
  check_quantized(W, what);
  ZAYA_CHECK(W.ndim() == rank, what, ": expected a ", rank, "-D quantized weight, got ", shape_str(W.shape));
}

// 127 / amax, the multiplier that takes a block's largest magnitude to 127; 0 for an all-zero block and for
// one so small (amax < 127 / FLT_MAX, ~4e-37) that the quotient overflows: its values, all below 1e-36,
// become zeros (an infinite multiplier would make them ±127 or NaN).
inline float block_inv_scale(float amax) {
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  return std::isfinite(inv) ? inv : 0.0f;
}

}  // namespace

void quantize_activations(ActQ8* out, const float* in, int64_t M, int64_t K) {
  ZAYA_CHECK(K % kQuantBlock == 0, "quantize_activations: K = ", K, " is not a multiple of ", kQuantBlock);
  const int64_t nb = K / kQuantBlock;
  out->q.resize(size_t(M * K));
  out->d.resize(size_t(M * nb));
  out->neg_sum128.resize(size_t(M * nb));
  for (int64_t m = 0; m < M; m++) {
    for (int64_t b = 0; b < nb; b++) {
      const float* x = in + m * K + b * kQuantBlock;
      int8_t* q = out->q.data() + m * K + b * kQuantBlock;
      float* d = out->d.data() + m * nb + b;
      int32_t sum = 0;
#if defined(__AVX512F__)
      // The scalar loop below on two vectors of 16, the same values: amax is exact in any order, the
      // multiply and the round to nearest even are per lane, and the sum of the int8 values is exact.
      // Scalar, a 16 x 2048 batch took 64 us (2 ns an element: a tenth of a 16-row Q8_0 product).
      const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
      const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
      const __m512 inf = _mm512_set1_ps(INFINITY);
      const bool finite = _mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) == 0xFFFF &&
                          _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ) == 0xFFFF;  // NaN compares false
      if (!finite) {
        std::memset(q, 0, kQuantBlock);
        *d = NAN;
      } else {
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        const __m512 inv = _mm512_set1_ps(block_inv_scale(amax));
        const __m512i lim = _mm512_set1_epi32(127);
        auto q16 = [&](__m512 v) {  // cvtps rounds to nearest even (MXCSR's default mode), then clamps
          const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
          return _mm512_max_epi32(_mm512_min_epi32(i, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
        };
        const __m512i i0 = q16(x0), i1 = q16(x1);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(i1));
        sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        *d = amax / 127.0f;
      }
#else
      float amax = 0.0f;
      bool finite = true;
      for (int64_t i = 0; i < kQuantBlock; i++) {
        finite = finite && std::isfinite(x[i]);
        amax = std::max(amax, std::fabs(x[i]));
      }
      if (!finite) {
        // NaN or inf: the block's scale carries it to the result (NaN), never a plausible number.
        std::memset(q, 0, kQuantBlock);
        *d = NAN;
      } else {
        const float inv = block_inv_scale(amax);
        for (int64_t i = 0; i < kQuantBlock; i++) {
          const float v = std::nearbyint(x[i] * inv);  // round to nearest even (the default mode)
          q[i] = int8_t(std::clamp(v, -127.0f, 127.0f));
          sum += q[i];
        }
        *d = amax / 127.0f;
      }
#endif
      out->neg_sum128[size_t(m * nb + b)] = -128 * sum;
    }
  }
}

void pack_for_decode(Tensor& W, bool release_source) {
#if defined(ZAYA_DECODE_VNNI)
  const bool bf16 = W.dtype == DType::BF16, fp8 = W.dtype == DType::F8_E4M3;
  if (W.decode_pack || (W.dtype != DType::Q8_0 && W.dtype != DType::MXFP4 && !bf16 && !fp8)) return;
  if (W.ndim() != 2 && W.ndim() != 3) return;
  if (!bf16) check_quantized(W, "pack_for_decode");
  const int64_t N = W.dim(-2), K = W.dim(-1), E = W.ndim() == 3 ? W.dim(0) : 1;
  if (N % 16 != 0 || K % 32 != 0) return;
  if (fp8) {
    // e4m3 NaN codes (S.1111.111) would widen to ±1.875 · 2^8 in the packed kernel: such a matrix keeps the
    // streaming kernel, which gives them their NaN. Per-row scales only (weight_scale [E, N, 1]).
    if (W.scales->shape.back() != 1) return;
    const auto* q = static_cast<const uint8_t*>(W.data);
    const size_t n = W.nbytes();
    bool nan = false;
#pragma omp parallel for schedule(static) num_threads(threads_here()) reduction(|| : nan) if (n > (1 << 20))
    for (size_t i = 0; i < n; i++) nan = nan || (q[i] & 0x7F) == 0x7F;
    if (nan) return;
  }
  // A 2-D BF16 matrix keeps its own pages: prefill's GEMM reads them (and a tied embedding its rows). 3-D
  // experts are read through the pack only (quant_grouped_linear_forward; many_rows unpacks bf16 tiles).
  if (bf16 && W.ndim() == 2) release_source = false;
  auto p = std::make_shared<DecodePack>();
  p->fmt = W.dtype;
  p->E = E, p->N = N, p->K = K, p->nb = K / 32;
  p->block_bytes = W.dtype == DType::Q8_0 ? kQ8PackBlock
                   : bf16                 ? kBf16PackBlock
                   : fp8                  ? kFp8PackBlock
                                          : kFp4PackBlock;
  if (fp8) {
    p->row_scale.resize(size_t(E * N));
    const float* s = W.scales->f32();
    for (int64_t i = 0; i < E * N; i++) p->row_scale[size_t(i)] = s[i] * 256.0f;
  }
  const size_t group_bytes = size_t(p->nb) * p->block_bytes;
  const size_t bytes = size_t(E) * size_t(N / 16) * group_bytes;
  p->mem = huge_alloc_shared(bytes);  // decode streams the pack: 2 MiB pages (core/tensor.h)
  void* mem = p->mem.get();
  p->data = static_cast<const uint8_t*>(mem);
  const int64_t groups = E * (N / 16);
#pragma omp parallel for schedule(static) num_threads(threads_here()) if (groups > 16)
  for (int64_t i = 0; i < groups; i++) {
    const int64_t e = i / (N / 16), g = i % (N / 16);
    pack_group(static_cast<uint8_t*>(mem) + size_t(i) * group_bytes, qmat(W, e), g);
  }
  W.decode_pack = p;
  if (release_source) {
    release_pages(W.data, W.nbytes());
    if (W.scales) release_pages(W.scales->data, W.scales->nbytes());
  }
#else
  (void)W, (void)release_source;
#endif
}

namespace {
std::atomic<int> g_int8_activations{-1};  // -1: not read from the environment yet
}  // namespace

bool quant_int8_activations() {
  int v = g_int8_activations.load(std::memory_order_acquire);
  if (v < 0) {
    const char* env = std::getenv("ZAYA_INT8_ACTIVATIONS");
    v = env && std::strcmp(env, "0") == 0 ? 0 : 1;
    int expected = -1;
    if (!g_int8_activations.compare_exchange_strong(expected, v)) v = expected;
  }
  return v == 1;
}

void set_quant_int8_activations(bool on) {
  g_int8_activations.store(on ? 1 : 0, std::memory_order_release);
}

int64_t bf16_dot_min_rows(DType fmt) {
  return fmt == DType::BF16 && cpu_full_width_avx512() ? 1 : kBf16DotMinRows;
}

bool quant_avx2_stream_available() {
#if defined(ZAYA_STREAM_AVX2)
  return true;
#else
  return false;
#endif
}

bool quant_bf16_dot_available() {
#if defined(ZAYA_DECODE_BF16_DOT)
  return true;
#else
  return false;
#endif
}

bool bf16_decode_pack_wanted(bool experts) {
  // [dense, experts]
  static const std::array<bool, 2> wanted = [] {
#if defined(ZAYA_DECODE_VNNI)
    const char* env = std::getenv("ZAYA_BF16_PACK");
    if (env && std::strcmp(env, "0") == 0) return std::array<bool, 2>{false, false};  // "0" / "1" override
    if (env && std::strcmp(env, "1") == 0) return std::array<bool, 2>{true, true};    // other values: default
    return std::array<bool, 2>{true, !cpu_fast_bf16_dot()};
#else
    return std::array<bool, 2>{false, false};
#endif
  }();
  return wanted[experts ? 1 : 0];
}

bool fp8_decode_pack_wanted() {
  static const bool wanted = [] {
#if defined(ZAYA_DECODE_VNNI)
    // On by default on every CPU these kernels build for (Intel Xeon, Zen 4, Zen 5: quant_gemm.h); "0" turns
    // it off, as ZAYA_BF16_PACK.
    const char* env = std::getenv("ZAYA_FP8_PACK");
    return !(env && std::strcmp(env, "0") == 0);
#else
    return false;
#endif
  }();
  return wanted;
}

bool has_decode_pack(const Tensor& W) {
  return W.decode_pack != nullptr;
}

bool bf16_streams(int64_t M) {
  return M <= kQuantStreamMaxRows && !gemm_batch_invariant();
}

void quant_linear_forward_with(QuantPath path, float* out, int64_t ldc, const float* in, int64_t M,
                               const Tensor& W, DType tile) {
  check_weight(W, 2, "quant_linear_forward");
  if (M == 0) return;
  if (path == QuantPath::Auto)
    path = M <= kQuantStreamMaxRows || gemm_batch_invariant() ? QuantPath::Stream : QuantPath::DequantGemm;
  if (path == QuantPath::DequantGemm) return many_rows(out, ldc, in, M, W, 0, tile);
  const QMat w = qmat(W, 0);
  // A float pack, where one exists, serves every streamed call: an FP8 matrix's own pages are released once
  // it is packed, and the packed kernel's fp32 products are the ones a packed model's other calls give.
  const bool packed = float_pack_of(W) != nullptr;
  if (path == QuantPath::Bf16Dot ||
      (path == QuantPath::Stream && !packed && takes_bf16_dot(w.fmt, M, w.K, tile))) {
#if defined(ZAYA_DECODE_BF16_DOT)
    ZAYA_CHECK(
        (w.fmt == DType::BF16 || w.fmt == DType::F8_E4M3) && w.K % 32 == 0,
        "quant_linear_forward: the bf16 dot kernel takes BF16 or FP8 weights with K a multiple of 32, got ",
        dtype_name(w.fmt), " K = ", w.K);
    thread_local std::vector<uint16_t> a16_here;  // the calling thread's (see below)
    const uint16_t* a16 = bf16_activations(in, M, w.K, &a16_here);
    const std::vector<Tile> tiles = matrix_tiles(w.N, w.row_bytes);
    run_tiles(tiles, size_t(w.N) * w.row_bytes,
              [&](const Tile& t) { dot16_tile_any(out, ldc, a16, M, w, t.n0, t.n1); });
    return;
#else
    ZAYA_CHECK(path != QuantPath::Bf16Dot, "quant_linear_forward: this build has no AVX512-BF16 dot kernel");
#endif
  }
#if defined(ZAYA_DECODE_VNNI) && defined(ZAYA_DECODE_BF16_DOT)
  if (path == QuantPath::PackedBf16Dot ||
      (path == QuantPath::Stream && packed && w.fmt == DType::BF16 && takes_bf16_dot(w.fmt, M, w.K, tile))) {
    const DecodePack* p = float_pack_of(W);
    ZAYA_CHECK(p && p->fmt == DType::BF16,
               "quant_linear_forward: the packed bf16 dot kernel takes a BF16 matrix with its decode pack");
    thread_local std::vector<uint32_t> ap_here;  // the calling thread's (see below)
    ap_here.resize(size_t(M * w.K / 2));
    bf16_pairs_transposed(ap_here.data(), in, M, w.K);
    const uint32_t* ap = ap_here.data();
    const std::vector<Tile> tiles = matrix_tiles(w.N, w.row_bytes);
    run_tiles(tiles, size_t(w.N) * w.row_bytes,
              [&](const Tile& t) { bf16_packed_dot_tile(out, ldc, ap, M, *p, 0, t.n0, t.n1); });
    return;
  }
#else
  ZAYA_CHECK(path != QuantPath::PackedBf16Dot,
             "quant_linear_forward: this build has no packed bf16 dot kernel");
#endif
  ZAYA_CHECK(path != QuantPath::PackedF32 || packed,
             "quant_linear_forward: the float packed kernel takes a BF16 or FP8 matrix with its decode pack");
#if defined(ZAYA_DECODE_VNNI)
  if (const DecodePack* p =
          path == QuantPath::Stream || path == QuantPath::PackedF32 ? float_pack_of(W) : nullptr) {
    // The activations transposed ([K, M]); one row is its own transpose.
    thread_local std::vector<float> at_here;  // the calling thread's (see below)
    const float* at = in;
    if (M > 1) {
      at_here.resize(size_t(M * w.K));
      transpose_activations(at_here.data(), in, M, w.K);
      at = at_here.data();
    }
    const std::vector<Tile> tiles = matrix_tiles(w.N, w.row_bytes);
    run_tiles(tiles, size_t(w.N) * w.row_bytes,
              [&](const Tile& t) { float_packed_tile_any(out, ldc, at, M, *p, 0, t.n0, t.n1); });
    return;
  }
  if (const DecodePack* p =
          path == QuantPath::Stream && quant_int8_activations() ? int8_pack_of(W) : nullptr) {
    // The calling thread's buffers (a lambda naming a thread_local would read its own thread's); the view
    // holds their addresses.
    thread_local ActQ8 aq_here;
    thread_local ActBlocks blocks_here;
    quantize_activations(&aq_here, in, M, w.K);
    const int64_t one_region[2] = {0, M};
    const ActBlocksView ab = act_blocks(&blocks_here, aq_here, one_region, 1, w.K);
    const std::vector<Tile> tiles = matrix_tiles(w.N, w.row_bytes);
    run_tiles(tiles, size_t(w.N / 16) * size_t(p->nb) * p->block_bytes,
              [&](const Tile& t) { packed_tile_any(out, ldc, ab, 0, M, *p, 0, t.n0, t.n1); });
    return;
  }
#endif
  if (path == QuantPath::Int8Avx2 || (path == QuantPath::Stream && takes_int8_avx2(w))) {
    const std::vector<Tile> tiles = matrix_tiles(w.N, w.row_bytes);
    const int64_t rows[2] = {0, M};
    int8_avx2_tiles(out, ldc, in, M, W, tiles, size_t(w.N) * w.row_bytes, rows);
    return;
  }
  thread_local std::vector<float> abuf;
  int64_t lda = 0;
  const float* a = stream_input(in, M, w.K, w.fmt, &abuf, &lda);
  const std::vector<Tile> tiles = matrix_tiles(w.N, w.row_bytes);
  const bool avx2 = path == QuantPath::StreamAvx2;
  run_tiles(tiles, size_t(w.N) * w.row_bytes,
            [&](const Tile& t) { stream_tile_any(out, ldc, a, lda, M, w, t.n0, t.n1, avx2); });
}

void quant_linear_forward(float* out, int64_t ldc, const float* in, int64_t M, const Tensor& W, DType tile) {
  quant_linear_forward_with(QuantPath::Auto, out, ldc, in, M, W, tile);
}

void quant_grouped_linear_forward(float* out, const float* in, const Tensor& W, const int64_t* offsets,
                                  int64_t E, DType tile) {
  check_weight(W, 3, "quant_grouped_linear_forward");
  ZAYA_CHECK(W.dim(0) == E, "quant_grouped_linear_forward: expert weights hold ", W.dim(0),
             " experts, expected ", E);
  ZAYA_CHECK(offsets != nullptr && offsets[0] == 0, "quant_grouped_linear_forward: offsets must start at 0");
  for (int64_t e = 0; e < E; e++) {
    ZAYA_CHECK(offsets[e + 1] >= offsets[e], "quant_grouped_linear_forward: offsets must be non-decreasing");
  }
  const int64_t N = W.dim(1), K = W.dim(2), T = offsets[E];
  if (T == 0) return;
  const bool invariant = gemm_batch_invariant();
  // Experts with many rows: dequantized tiles into the bf16 GEMM, one expert at a time on all threads.
  std::vector<int64_t> streamed;
  for (int64_t e = 0; e < E; e++) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    if (rows > kQuantStreamMaxRows && !invariant) {
      many_rows(out + offsets[e] * N, N, in + offsets[e] * K, rows, W, e, tile);
    } else {
      streamed.push_back(e);
    }
  }
  if (streamed.empty()) return;
#if defined(ZAYA_DECODE_VNNI)
  if (const DecodePack* p = float_pack_of(W)) {
    // Each expert's rows transposed ([K, rows] at r0 · K; one row is its own transpose), or for the packed
    // bf16 dot kernel as bf16 pairs ([K / 2, rows] at r0 · K / 2).
    thread_local std::vector<float> at_here;  // the calling thread's (see quant_linear_forward_with)
    thread_local std::vector<uint32_t> ap_here;
    at_here.resize(size_t(T * K));
    std::vector<char> dot(size_t(E), 0);
    for (int64_t e : streamed) {
      const int64_t r0 = offsets[e], rows = offsets[e + 1] - r0;
#if defined(ZAYA_DECODE_BF16_DOT)
      if (p->fmt == DType::BF16 && takes_bf16_dot(DType::BF16, rows, K, tile)) {
        ap_here.resize(size_t(T * K / 2));
        bf16_pairs_transposed(ap_here.data() + r0 * K / 2, in + r0 * K, rows, K);
        dot[size_t(e)] = 1;
        continue;
      }
#endif
      transpose_activations(at_here.data() + r0 * K, in + r0 * K, rows, K);
    }
    const float* at = at_here.data();
    const uint32_t* ap = ap_here.data();
    const std::vector<Tile> tiles = expert_tiles(streamed, N, dtype_row_bytes(W.dtype, K));
    run_tiles(tiles, streamed.size() * size_t(N) * dtype_row_bytes(W.dtype, K), [&](const Tile& t) {
      const int64_t r0 = offsets[t.expert], rows = offsets[t.expert + 1] - r0;
#if defined(ZAYA_DECODE_BF16_DOT)
      if (dot[size_t(t.expert)])
        return bf16_packed_dot_tile(out + r0 * N, N, ap + r0 * K / 2, rows, *p, t.expert, t.n0, t.n1);
#endif
      float_packed_tile_any(out + r0 * N, N, at + r0 * K, rows, *p, t.expert, t.n0, t.n1);
    });
    return;
  }
#endif
  // BF16 / FP8 experts: those with enough rows on the bf16 dot kernel, the others on the fp32 one, all in
  // one parallel loop.
  bool any_dot = false;
  for (int64_t e : streamed)
    any_dot = any_dot || takes_bf16_dot(W.dtype, offsets[e + 1] - offsets[e], K, tile);
  if (any_dot) {
#if defined(ZAYA_DECODE_BF16_DOT)
    thread_local std::vector<uint16_t> a16_here;
    const uint16_t* a16 = bf16_activations(in, T, K, &a16_here);
    const std::vector<Tile> tiles = expert_tiles(streamed, N, dtype_row_bytes(W.dtype, K));
    run_tiles(tiles, streamed.size() * size_t(N) * dtype_row_bytes(W.dtype, K), [&](const Tile& t) {
      const int64_t r0 = offsets[t.expert], rows = offsets[t.expert + 1] - r0;
      if (takes_bf16_dot(W.dtype, rows, K, tile))
        dot16_tile_any(out + r0 * N, N, a16 + r0 * K, rows, qmat(W, t.expert), t.n0, t.n1);
      else
        stream_tile_any(out + r0 * N, N, in + r0 * K, K, rows, qmat(W, t.expert), t.n0, t.n1);
    });
    return;
#endif
  }
#if defined(ZAYA_DECODE_VNNI)
  if (const DecodePack* p = quant_int8_activations() ? int8_pack_of(W) : nullptr) {
    thread_local ActQ8 aq_here;  // the calling thread's (see quant_linear_forward_with)
    thread_local ActBlocks blocks_here;
    quantize_activations(&aq_here, in, T, K);
    const ActBlocksView ab = act_blocks(&blocks_here, aq_here, offsets, E, K);
    const std::vector<Tile> tiles = expert_tiles(streamed, N, dtype_row_bytes(W.dtype, K));
    run_tiles(tiles, streamed.size() * size_t(N / 16) * size_t(p->nb) * p->block_bytes, [&](const Tile& t) {
      const int64_t r0 = offsets[t.expert], rows = offsets[t.expert + 1] - r0;
      packed_tile_any(out + r0 * N, N, ab, r0, rows, *p, t.expert, t.n0, t.n1);
    });
    return;
  }
#endif
  if (takes_int8_avx2(qmat(W, 0))) {
    const std::vector<Tile> tiles = expert_tiles(streamed, N, dtype_row_bytes(W.dtype, K));
    int8_avx2_tiles(out, N, in, T, W, tiles, streamed.size() * size_t(N) * dtype_row_bytes(W.dtype, K),
                    offsets);
    return;
  }
  thread_local std::vector<float> abuf;
  int64_t lda = 0;
  const float* a = stream_input(in, T, K, W.dtype, &abuf, &lda);
  const std::vector<Tile> tiles = expert_tiles(streamed, N, dtype_row_bytes(W.dtype, K));
  run_tiles(tiles, streamed.size() * size_t(N) * dtype_row_bytes(W.dtype, K), [&](const Tile& t) {
    const int64_t r0 = offsets[t.expert], rows = offsets[t.expert + 1] - r0;
    stream_tile_any(out + r0 * N, N, a + r0 * lda, lda, rows, qmat(W, t.expert), t.n0, t.n1);
  });
}

}  // namespace zaya
