// The CPU GEMM backend behind gemm.h: oneDNN matmul (fp32 and bf16) and OpenBLAS sgemm (fp32).
//
// Measured choice (2-core AMD EPYC, Zen 4, AVX-512 + AVX512_BF16, 2 OpenMP threads; GFLOP/s, best of
// interleaved repetitions of bench/gemm_bench taken while the shared build machine was idle;
// measure_gemm_peak_gflops gives f32 215, bf16 424). "fixed" = oneDNN primitive with every dim fixed (its
// brgemm kernel), "rt-M" = M a runtime dim (oneDNN then runs its gemm:jit kernel), OpenBLAS = single-
// threaded sgemm calls split over our threads.
//
//   product (M x N x K)              layout   f32 fixed  f32 rt-M  OpenBLAS  bf16 fixed  bf16 rt-M
//   qk_proj     2048x1280x1024       x·Wᵀ        216       217       198        432        441
//   qk_proj dX  2048x1024x1280       dY·W        215       219       205        432        436
//   qk_proj dW  1280x1024x2048       dYᵀ·X       200       218       201        404        433
//   o_proj dW   1024x1024x2048       dYᵀ·X       195       209       203        392        405
//   lm_head     2048x32768x1024      x·Wᵀ        213       219       199        366        433
//   lm_head dW  32768x1024x2048      dYᵀ·X       198       205       194        179        404
//   v_proj      2048x64x1024         x·Wᵀ        215       143       182        406        360
//   router      2048x256x1024        x·Wᵀ        206       152       193        437        402
//   expert       128x2048x1024       x·Wᵀ        205       104       166        424        388
//   expert dW   2048x1024x128        dYᵀ·X       200       216       189        405        421
//   decode         1x1280x1024       x·Wᵀ         20        60        65         43        135
//   decode         8x2048x1024       x·Wᵀ         97       153        35        207        123
//   rows          16x2048x1024       x·Wᵀ        149        20        64        247        178
//   tiny          16x16x16           x·Wᵀ          4 (2.2 us a call)   35 (0.3 us)
//
// Zen 5 (family 26, full-width 512-bit units; measure_gemm_peak_gflops bf16 ~820), bf16, same bench,
// interleaved repetitions, medians (dW products accumulate, beta = 1):
//
//   product (M x N x K)              layout   bf16 fixed  bf16 rt-M  bf16 rt-MK
//   expert       128x2048x1024       x·Wᵀ        658        754
//   expert down  128x1024x1024       x·Wᵀ        646        733
//   expert dX    128x1024x2048       dY·W        721        787
//   expert dW   2048x1024x128        dYᵀ·X       641        682        681
//   down dW     1024x1024x128        dYᵀ·X       657        619        628
//   lm_head      512x32768x1024      x·Wᵀ        699        767        (the backward's 512-row chunks)
//   lm_head dX   512x1024x32768      dY·W        685        753
//   lm_head dW 32768x1024x512        dYᵀ·X       640        747        747
//   router      2048x256x1024        x·Wᵀ        726        803
//   v_proj      2048x64x1024         x·Wᵀ        702        666
//
// So on Zen 5 bf16 products of 128+ rows and columns take rt-M (cpu_full_width_avx512); Zen 4 keeps the
// rules below.
//
// Zen 3 (family 25 model 1, AVX2 only: oneDNN 2.6 has no bf16 matmul there, so bf16 products widen both
// operands to fp32, gemm_onednn_bf16), fp32, same bench: the mid shapes run at 145-170 in every layout and
// backend (peak ~170), except a transposed A with a narrow N: the main job's LM head weight gradient
// 8192x256x2048 dYᵀ·X runs at 63-75 on both oneDNN kernels (OpenBLAS 149), and at 127-138 as the same product
// with dYᵀ copied untransposed (dY·X layout). The widening copies every element anyway, so there it writes
// a transposed A untransposed (to_f32_of_bf16_transposed).
//
// Intel Xeon (family 6 model 207, 2 CPUs, avx512bf16 without AMX under its hypervisor; 2026-12-04), same
// bench, GFLOP/s: oneDNN's bf16 matmul (its avx512_core_bf16 kernels; ONEDNN_MAX_CPU_ISA lower: ~61) against
// the same bf16 product widened to fp32 (ZAYA_ONEDNN_BF16=0: the copies included). vdpbf16ps runs at half
// the fma's instruction rate there (4.4 vs 8.9 G/s a core), so bf16 gives no more products per cycle:
//
//   product (M x N x K)              layout   bf16   widened        product                    bf16   widened
//   qk_proj     2048x1280x1024       x·Wᵀ     169     318           decode      1x1280x1024     104      12
//   lm_head dW 32768x1024x2048       dYᵀ·X    169     277           rows        8x2048x1024      98      61
//   expert       128x2048x1024       x·Wᵀ     164     256           rows       16x2048x1024     129     103
//   expert dW   2048x1024x128        dYᵀ·X    163     287           rows       32x2048x1024     147     160
//   v_proj      2048x64x1024         x·Wᵀ     168     242           rows       64x2048x1024     158     226
//
// So there bf16 products of kWidenBf16MinDim (32)+ rows and columns widen (cpu_fast_bf16_matmul, gemm.h);
// fewer rows keep oneDNN's bf16 matmul, where widening the weights on every call costs more than it gains.
//
// So oneDNN throughout, zaya's own small kernel (gemm_small.h) for tiny fp32 products (lowest call overhead;
// it replaced OpenBLAS there, whose kernel follows OPENBLAS_CORETYPE: bench/openblas_coretype.sh), and per
// shape class: rt-M when all of M, N, K are >= 1024 (up to 2x for the lm_head weight gradient) and for
// one-row products; rt-M also for fp32 below 16 rows (gemm:jit has a GEMV-like path where brgemm wastes its
// register tile, but collapses at 16 rows); fixed shapes otherwise, where rt-M loses up to 2x (expert-sized
// M=128, narrow N). Fixed shapes cost one primitive per M (~100 us to create, ~60 KB): the cache below
// holds them, so a new expert row count costs one creation, once.
//
// Batch invariance (set_gemm_batch_invariant, ZAYA_BATCH_INVARIANT=1; issue 13). The choice above makes a
// row's bits depend on M: the backend changes with M (Small for tiny fp32 products, rt-M gemm:jit for fp32
// below 16 rows and for every 1-row product, brgemm fixed shapes otherwise), and each has its own order of
// the sum over K. tests/batch_invariance_test.cpp measured it on this machine (rows compared with the same
// rows of a 600-row product): fp32, rows of every product at M < 16 differ (lm_head: M < 8; mid.json: 46 of
// 104 (product, M) cases; the golden config: 56 of 104, its products being tiny); bf16, M = 1 differs for
// every product (8 of 104); brgemm's fixed shapes gave the same rows for every M >= 16 here, but nothing in
// oneDNN promises that (its blocking and K split are chosen per shape and thread count). Grouped experts:
// 17-24 of 27 token sets changed some shared token's output. With the switch on, every product runs on
// RowInvariant (gemm_rows.h): each element of C is one fixed sequence of operations that depends only on
// K, the dtypes and B's layout (16 fp32 lanes over k mod 16, or vdpbf16ps lanes over k pairs, then a
// fixed tree), the tiles over threads change only who computes an element, and the bf16 rounding of an
// fp32 operand is element-wise. So row r of C is a function of row r of op(A), of B, alpha, beta and row r
// of C, bitwise, for any M, thread count or parallel region; the test checks the mid.json and golden
// products at 13 row counts (fp32 and bf16 weights), the grouped experts, and a whole model's logits
// across batch sizes and prefill chunkings.
// Cost, measured with interleaved repetitions (zaya bench decode --config configs/mid.json --batches
// 1,4,8,16 --prefill 16 --steps 16 --repeats 9 --compare-invariant; median of paired ratios, invariant /
// default): decode tokens/s fp32 1.14 / 1.29 / 1.18 / 1.12, bf16 1.08 / 1.37 / 1.27 / 1.19 at B = 1 / 4 /
// 8 / 16 (a second run, machine loaded: fp32 1.01 / 1.46 / 1.09 / 1.11, bf16 0.95 / 1.22 / 1.11 / 1.11;
// decode products are 1-16 rows, where the row kernel streams the weights as well as oneDNN's
// GEMV and beats its small-M paths); so no cost for decode. Long prefill pays: zaya bench forward
// --batch 1 --seq 512 gives 0.71-0.75x (fp32) and 0.68-0.70x (bf16) tokens/s, the row kernel reaching
// ~50-80% of oneDNN's big-M GFLOP/s (bench/gemm_bench: 2048x1024x1024 f32 153 vs 332, bf16 weights 421 vs
// 703; lm_head 2048 rows f32 209 vs 320, bf16 488 vs 605).
#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <unordered_map>

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/threads.h"
#include "kernels/gemm_rows.h"
#include "kernels/gemm_small.h"
#include "kernels/quant_gemm.h"

namespace zaya {

namespace {

// ---------------------------------------------------------------------------------------------------------
// Per-thread scratch buffers (bf16 copies of fp32 operands, oneDNN scratchpads). Thread-local, so concurrent
// gemm() calls from several threads never share one; they grow and are reused, never shrink.

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data_); }

  // At least `bytes` bytes, 64-byte aligned; the previous contents are not kept.
  void* get(size_t bytes) {
    if (bytes > capacity_) {
      std::free(data_);
      data_ = nullptr;
      capacity_ = 0;
      const size_t rounded = (bytes + 4095) / 4096 * 4096;
      data_ = std::aligned_alloc(64, rounded);
      ZAYA_CHECK(data_ != nullptr, "out of memory allocating a ", rounded, "-byte GEMM scratch buffer");
      capacity_ = rounded;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

thread_local ScratchBuffer t_bf16_a, t_bf16_b, t_f32_a, t_f32_b, t_dnnl_scratchpad;

// Element (r, c) of op(X) as float (slow path: the reference backend only).
inline float load(const MatRef& X, int64_t r, int64_t c) {
  int64_t i = X.trans ? c * X.ld + r : r * X.ld + c;
  if (X.dtype == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(X.data)[i]);
  return static_cast<const float*>(X.data)[i];
}

// C[M,N] = beta * C, where beta == 0 writes zeros without reading C.
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t m = 0; m < M; m++) {
    float* row = C + m * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + N, 0.0f);
    } else {
      for (int64_t n = 0; n < N; n++) row[n] *= beta;
    }
  }
}

// Products below this many flops run on one thread: measured on this machine, a 96^3 oneDNN product
// (1.8 MFLOP) takes 17 us on one thread and 15 us on two, 64^3 takes 6 us vs 7.5 us (fork/join cost).
constexpr double kParallelMinFlops = 1.5e6;

// Threads a product of `flops` should use from here.
int gemm_threads(double flops) {
  return flops < kParallelMinFlops ? 1 : threads_here();
}

// Sets OpenMP's thread count for this thread's next parallel regions (those oneDNN opens) and restores it.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : saved_(omp_get_max_threads()) {
    if (n != saved_) omp_set_num_threads(n);
  }
  ~ScopedOmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

// A bf16 copy of the fp32 operand X stored as [rows, cols] with row stride X.ld, packed (ld = cols) into
// `buf`. Parallel over rows when large and not already inside a parallel region.
MatRef to_bf16(const MatRef& X, int64_t rows, int64_t cols, ScratchBuffer& buf) {
  auto* dst = static_cast<uint16_t*>(buf.get(size_t(rows * cols) * sizeof(uint16_t)));
  const auto* src = static_cast<const float*>(X.data);
  const int nt = rows * cols >= (int64_t(1) << 16) ? threads_here() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < rows; r++) convert_f32_to_bf16(dst + r * cols, src + r * X.ld, cols);
  return {dst, DType::BF16, cols, X.trans};
}

// dst[0..n) = the bf16 values of row `src` (n elements of X's dtype) in fp32: bf16 widened, fp32 rounded.
void bf16_values_of_row(float* dst, const MatRef& X, const void* src, int64_t n) {
  if (X.dtype == DType::BF16) {
    convert_bf16_to_f32(dst, static_cast<const uint16_t*>(src), n);
  } else {
    round_f32_to_bf16_values(dst, static_cast<const float*>(src), n);
  }
}

// The fp32 copy of operand X (stored as [rows, cols], row stride X.ld) holding its bf16 values: bf16 elements
// widened, fp32 ones rounded to bf16 and widened back (a bf16 product's inputs, exactly), packed into `buf`.
// For CPUs where oneDNN has no bf16 matmul (see gemm_onednn_bf16).
MatRef to_f32_of_bf16(const MatRef& X, int64_t rows, int64_t cols, ScratchBuffer& buf) {
  auto* dst = static_cast<float*>(buf.get(size_t(rows * cols) * sizeof(float)));
  const size_t esize = X.dtype == DType::BF16 ? 2 : 4;
  const auto* src = static_cast<const char*>(X.data);
  const int nt = rows * cols >= (int64_t(1) << 16) ? threads_here() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < rows; r++)
    bf16_values_of_row(dst + r * cols, X, src + size_t(r * X.ld) * esize, cols);
  return {dst, DType::F32, cols, X.trans};
}

// The same values as to_f32_of_bf16, stored transposed: X is stored as [rows, cols] (row stride X.ld) and
// the copy is [cols, rows], packed, so a transposed operand becomes a plain one. oneDNN's fp32 kernel on
// AVX2 runs a transposed A at half speed when N is narrow (bench/gemm_bench small_lm_head dW, 8192x256x2048:
// 70 GFLOP/s as dYᵀ·X, 130 as the same product with dYᵀ copied), and the widening copies every element
// anyway, so the transposed write costs little more.
MatRef to_f32_of_bf16_transposed(const MatRef& X, int64_t rows, int64_t cols, ScratchBuffer& buf) {
  auto* dst = static_cast<float*>(buf.get(size_t(rows * cols) * sizeof(float)));  // [cols, rows]
  const size_t esize = X.dtype == DType::BF16 ? 2 : 4;
  const auto* src = static_cast<const char*>(X.data);
  constexpr int64_t kRows = 8, kCols = 512;  // a strip of 8 stored rows, 512 columns at a time (16 KB)
  const int64_t strips = (rows + kRows - 1) / kRows;
  const int nt = rows * cols >= (int64_t(1) << 16) ? threads_here() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t s = 0; s < strips; s++) {
    alignas(64) float strip[kRows][kCols];  // strip[i][j] = value of stored (r0 + i, c0 + j)
    const int64_t r0 = s * kRows, nr = std::min(kRows, rows - r0);
    for (int64_t c0 = 0; c0 < cols; c0 += kCols) {
      const int64_t nc = std::min(kCols, cols - c0);
      for (int64_t i = 0; i < nr; i++)
        bf16_values_of_row(strip[i], X, src + (size_t((r0 + i) * X.ld) + size_t(c0)) * esize, nc);
      int64_t j = 0;
#if defined(__AVX2__)
      if (nr == kRows) {
        for (; j + 8 <= nc; j += 8) {  // 8x8 transpose in registers
          __m256 v[8], t[8];
          for (int i = 0; i < 8; i++) v[i] = _mm256_load_ps(&strip[i][j]);
          for (int i = 0; i < 8; i += 2) {
            t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
            t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
          }
          for (int i = 0; i < 8; i += 4) {
            v[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
            v[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
            v[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
            v[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
          }
          // v[q] (q < 4) holds column j+q of rows 0-3 in its low half and column j+q+4 in its high half;
          // v[q+4] the same for rows 4-7: joining the halves gives whole columns.
          for (int q = 0; q < 4; q++) {
            float* out_lo = dst + (c0 + j + q) * rows + r0;
            float* out_hi = dst + (c0 + j + q + 4) * rows + r0;
            _mm256_storeu_ps(out_lo, _mm256_permute2f128_ps(v[q], v[q + 4], 0x20));
            _mm256_storeu_ps(out_hi, _mm256_permute2f128_ps(v[q], v[q + 4], 0x31));
          }
        }
      }
#endif
      for (; j < nc; j++)
        for (int64_t i = 0; i < nr; i++) dst[(c0 + j) * rows + r0 + i] = strip[i][j];
    }
  }
  return {dst, DType::F32, rows, false};
}

// ---------------------------------------------------------------------------------------------------------
// Reference backend: plain loops, fp32 accumulation.

void reference_gemm(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B,
                    float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) acc += load(A, m, k) * load(B, k, n);
      float& c = C[m * ldc + n];
      c = beta == 0.0f ? alpha * acc : alpha * acc + beta * c;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// OpenBLAS backend: OpenBLAS stays single-threaded (core/threads.h); we split C over the OpenMP threads.

// [begin, end) of part `i` of `parts` over `total`, boundaries rounded to `align` so each thread's block
// starts on a vector boundary.
void split_range(int64_t total, int parts, int i, int64_t align, int64_t* begin, int64_t* end) {
  auto boundary = [&](int j) {
    if (j >= parts) return total;
    return std::min(total, (total * j / parts) / align * align);
  };
  *begin = boundary(i);
  *end = boundary(i + 1);
}

void openblas_gemm(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B, float beta,
                   float* C, int64_t ldc) {
  ZAYA_CHECK(A.dtype == DType::F32 && B.dtype == DType::F32, "the OpenBLAS GEMM backend is fp32 only; got A ",
             dtype_name(A.dtype), ", B ", dtype_name(B.dtype));
  ensure_blas_single_threaded();
  const auto* a = static_cast<const float*>(A.data);
  const auto* b = static_cast<const float*>(B.data);
  // One block C[m0:m1, n0:n1] = alpha * op(A)[m0:m1, :] · op(B)[:, n0:n1] + beta * C.
  auto block = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (m1 <= m0 || n1 <= n0) return;
    cblas_sgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans, B.trans ? CblasTrans : CblasNoTrans,
                m1 - m0, n1 - n0, K, alpha, a + (A.trans ? m0 : m0 * A.ld), A.ld,
                b + (B.trans ? n0 * B.ld : n0), B.ld, beta, C + m0 * ldc + n0, ldc);
  };
  const int nt = gemm_threads(2.0 * M * N * K);
  if (nt == 1) {
    block(0, M, 0, N);
    return;
  }
  // Split the longer side: measured, rows for tall products (2048x64: 183 vs 136 GFLOP/s split by columns),
  // columns for short ones (128x2048: 169 vs 147).
  const bool split_rows = M >= N || M >= 512;
#pragma omp parallel num_threads(nt)
  {
    int64_t begin, end;
    split_range(split_rows ? M : N, omp_get_num_threads(), omp_get_thread_num(), 16, &begin, &end);
    if (split_rows) {
      block(begin, end, 0, N);
    } else {
      block(0, M, begin, end);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// oneDNN backend. Creating a matmul primitive costs ~100 us (JIT); executing a cached one costs a few us of
// overhead, so primitives live in a process-wide cache keyed by everything that shapes them.

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Streams are not thread-safe; each thread gets its own (cheap on CPU).
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

struct PrimitiveKey {
  int64_t M, N, K;  // M (and K) == DNNL_RUNTIME_DIM_VAL for a runtime-M (runtime-MK) primitive
  int64_t lda, ldb, ldc;
  bool trans_a, trans_b, bf16;
  int threads;  // oneDNN fixes a primitive's thread partition when it is created
  uint32_t alpha_bits, beta_bits;
  bool operator==(const PrimitiveKey&) const = default;
};

struct PrimitiveKeyHash {
  size_t operator()(const PrimitiveKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(k.M), mix(k.N), mix(k.K), mix(k.lda), mix(k.ldb), mix(k.ldc);
    mix(uint64_t(k.trans_a) | uint64_t(k.trans_b) << 1 | uint64_t(k.bf16) << 2 | uint64_t(k.threads) << 3);
    mix(k.alpha_bits), mix(k.beta_bits);
    return size_t(h);
  }
};

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
};

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

// Memory descriptors of op(A)[M,K], op(B)[K,N] (strides express the transposes) and C[M,N].
// M and K are the key's (possibly runtime) dims when creating, the actual ones when executing.
dnnl::memory::desc desc_a(const PrimitiveKey& k, int64_t M, int64_t K) {
  return dnnl::memory::desc({M, K}, k.bf16 ? dt::bf16 : dt::f32, k.trans_a ? dims{1, k.lda} : dims{k.lda, 1});
}
dnnl::memory::desc desc_b(const PrimitiveKey& k, int64_t K) {
  return dnnl::memory::desc({K, k.N}, k.bf16 ? dt::bf16 : dt::f32,
                            k.trans_b ? dims{1, k.ldb} : dims{k.ldb, 1});
}
dnnl::memory::desc desc_c(const PrimitiveKey& k, int64_t M) {
  return dnnl::memory::desc({M, k.N}, dt::f32, dims{k.ldc, 1});
}

std::shared_ptr<const Primitive> create_primitive(const PrimitiveKey& k) {
  dnnl::primitive_attr attr;
  // A user scratchpad (ours is per thread) lets several threads execute one primitive concurrently.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  float alpha, beta;
  std::memcpy(&alpha, &k.alpha_bits, 4);
  std::memcpy(&beta, &k.beta_bits, 4);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);  // C = alpha * A·B + beta * C
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc(desc_a(k, k.M, k.K), desc_b(k, k.K), desc_c(k, k.M));
  dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
  return std::make_shared<const Primitive>(Primitive{dnnl::matmul(pd), pd.scratchpad_desc()});
}

class PrimitiveCache {
 public:
  std::shared_ptr<const Primitive> get(const PrimitiveKey& key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    // Created outside the lock: two threads may build the same primitive once; the first insert wins.
    std::shared_ptr<const Primitive> made = create_primitive(key);
    std::lock_guard<std::mutex> lock(mu_);
    // Each primitive holds ~60 KB of JIT code; expert GEMMs see a new M nearly every call, so bound the
    // cache. Dropping everything is crude but rare, and oneDNN's own cache makes the rebuild cheap.
    if (map_.size() >= kCapacity) map_.clear();
    return map_.emplace(key, std::move(made)).first->second;
  }

  int64_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return int64_t(map_.size());
  }

 private:
  static constexpr size_t kCapacity = 1024;
  std::mutex mu_;
  std::unordered_map<PrimitiveKey, std::shared_ptr<const Primitive>, PrimitiveKeyHash> map_;
};

PrimitiveCache& primitive_cache() {
  static PrimitiveCache cache;
  return cache;
}

// A and B are both F32 or both BF16 here.
void onednn_gemm(bool runtime_m, bool runtime_k, int64_t M, int64_t N, int64_t K, float alpha,
                 const MatRef& A, const MatRef& B, float beta, float* C, int64_t ldc) {
  PrimitiveKey key{};
  key.M = runtime_m ? DNNL_RUNTIME_DIM_VAL : M;
  key.N = N;
  key.K = runtime_k ? DNNL_RUNTIME_DIM_VAL : K;
  key.lda = A.ld, key.ldb = B.ld, key.ldc = ldc;
  key.trans_a = A.trans, key.trans_b = B.trans;
  key.bf16 = A.dtype == DType::BF16;
  std::memcpy(&key.alpha_bits, &alpha, 4);
  std::memcpy(&key.beta_bits, &beta, 4);
  key.threads = gemm_threads(2.0 * M * N * K);
  // Both creation (which sizes the partition) and execution see this thread count.
  ScopedOmpThreads scoped_threads(key.threads);
  try {
    std::shared_ptr<const Primitive> prim = primitive_cache().get(key);
    dnnl::engine& engine = cpu_engine();
    dnnl::memory a(desc_a(key, M, K), engine, const_cast<void*>(A.data));
    dnnl::memory b(desc_b(key, K), engine, const_cast<void*>(B.data));
    dnnl::memory c(desc_c(key, M), engine, C);
    dnnl::memory scratch(prim->scratchpad, engine, t_dnnl_scratchpad.get(prim->scratchpad.get_size()));
    dnnl::stream& stream = thread_stream();
    prim->matmul.execute(
        stream,
        {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, scratch}});
    stream.wait();
  } catch (const dnnl::error& e) {
    fail(str_cat("oneDNN matmul ", M, "x", N, "x", K, " (", key.bf16 ? "bf16" : "f32", ", trans_a=", A.trans,
                 ", trans_b=", B.trans, ", lda=", A.ld, ", ldb=", B.ld, ", ldc=", ldc,
                 ") failed: ", e.what()));
  }
}

// Whether oneDNN creates bf16 matmuls on this CPU: a 1x1x1 primitive, once.
bool probe_onednn_bf16() {
  try {
    PrimitiveKey key{};
    key.M = key.N = key.K = 1;
    key.lda = key.ldb = key.ldc = 1;
    key.bf16 = true;
    key.threads = 1;
    const float one = 1.0f, zero = 0.0f;
    std::memcpy(&key.alpha_bits, &one, 4);
    std::memcpy(&key.beta_bits, &zero, 4);
    create_primitive(key);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// How bf16 products run on the oneDNN backends: -1 until first read (then the probe, the CPU and
// ZAYA_ONEDNN_BF16 decide), else one of these.
enum Bf16Mode : int {
  kBf16Widened = 0,  // every product widened to fp32 (no oneDNN bf16 matmul here, or forced)
  kBf16OneDnn = 1,   // every product a oneDNN bf16 matmul
  kBf16ByShape = 2,  // kWidenBf16MinDim+ rows and columns widened, the rest oneDNN bf16 (gemm.h)
};
std::atomic<int> g_onednn_bf16{-1};

// This CPU's mode: none without oneDNN's bf16 matmul, by shape where it is slower than the fp32 one.
int default_bf16_mode() {
  if (!probe_onednn_bf16()) return kBf16Widened;
  return cpu_fast_bf16_matmul() ? kBf16OneDnn : kBf16ByShape;
}

int bf16_mode() {
  int v = g_onednn_bf16.load(std::memory_order_acquire);
  if (v < 0) {
    const char* env = std::getenv("ZAYA_ONEDNN_BF16");
    v = default_bf16_mode();
    if (env && std::strcmp(env, "0") == 0) v = kBf16Widened;
    if (env && std::strcmp(env, "1") == 0 && v != kBf16Widened) v = kBf16OneDnn;
    int expected = -1;
    if (!g_onednn_bf16.compare_exchange_strong(expected, v)) v = expected;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// Dispatch.

// The batch-invariance switch: -1 until first read (then ZAYA_BATCH_INVARIANT decides), else 0 or 1.
std::atomic<int> g_batch_invariant{-1};

bool batch_invariant_now() {
  int v = g_batch_invariant.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("ZAYA_BATCH_INVARIANT");
    const int from_env = env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0 ? 1 : 0;
    int expected = -1;
    g_batch_invariant.compare_exchange_strong(expected, from_env);
    v = g_batch_invariant.load(std::memory_order_relaxed);
  }
  return v == 1;
}

// The fastest backend for a shape (the default mode).
GemmBackend choose_fast_backend(int64_t M, int64_t N, int64_t K, bool bf16) {
  // The measurements behind each rule are in the table at the top of this file.
  // Tiny fp32 products: zaya's small kernel (0.35 us at 16^3 vs oneDNN's 1.9 us call overhead; past ~0.1
  // MFLOP oneDNN is faster: 48^3 4 vs 7 us, 1x256x256 rt-M 6 vs 9 us; bench/gemm_bench, Zen 5).
  if (!bf16 && 2.0 * M * N * K < 1e5) return GemmBackend::Small;
  if (M == 1) return GemmBackend::OneDnnRuntimeM;
  // fp32 with few rows; gemm:jit collapses at M=16 (22 vs 128) and trails for the 32768-wide lm_head.
  if (!bf16 && M < 8) return GemmBackend::OneDnnRuntimeM;
  if (!bf16 && M < 16 && N <= 4096) return GemmBackend::OneDnnRuntimeM;
  if (M >= 1024 && N >= 1024 && K >= 1024) return GemmBackend::OneDnnRuntimeM;
  // Zen 5 (full-width AVX-512): rt-M for bf16 from 128 rows and columns (table above, Zen 5 columns).
  if (bf16 && M >= 128 && N >= 128 && cpu_full_width_avx512()) return GemmBackend::OneDnnRuntimeM;
  return GemmBackend::OneDnn;
}

GemmBackend choose_backend(int64_t M, int64_t N, int64_t K, bool bf16) {
  // Batch-invariant mode: one backend, one order per element, whatever M is (gemm_rows.h).
  if (batch_invariant_now()) return GemmBackend::RowInvariant;
  return choose_fast_backend(M, N, K, bf16);
}

void check_operand(const char* name, const MatRef& X, int64_t rows, int64_t cols) {
  ZAYA_CHECK(X.dtype == DType::F32 || X.dtype == DType::BF16, "gemm: operand ", name,
             " must be F32 or BF16, got ", dtype_name(X.dtype));
  // Stored as [rows, cols] when not transposed, [cols, rows] when transposed.
  const int64_t stored_cols = X.trans ? rows : cols;
  ZAYA_CHECK(X.ld >= std::max<int64_t>(stored_cols, 1), "gemm: operand ", name, " has row stride ", X.ld,
             " but its stored rows hold ", stored_cols, " elements", X.trans ? " (transposed)" : "");
  ZAYA_CHECK(X.data != nullptr, "gemm: operand ", name, " is null for a ", rows, "x", cols, " product");
}

}  // namespace

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::Auto:
      return "auto";
    case GemmBackend::OneDnn:
      return "onednn";
    case GemmBackend::OneDnnRuntimeM:
      return "onednn-runtime-m";
    case GemmBackend::OneDnnRuntimeMK:
      return "onednn-runtime-mk";
    case GemmBackend::Small:
      return "small";
    case GemmBackend::OpenBlas:
      return "openblas";
    case GemmBackend::Reference:
      return "reference";
    case GemmBackend::RowInvariant:
      return "row-invariant";
  }
  return "?";
}

void gemm_with(GemmBackend backend, int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A,
               const MatRef& B, float beta, float* C, int64_t ldc) {
  ZAYA_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0) return;
  ZAYA_CHECK(C != nullptr, "gemm: output C is null for a ", M, "x", N, " product");
  ZAYA_CHECK(ldc >= N, "gemm: output row stride ldc=", ldc, " is smaller than N=", N);
  if (K == 0 || alpha == 0.0f) {  // nothing to multiply; BLAS semantics still scale C
    scale_c(M, N, beta, C, ldc);
    return;
  }
  check_operand("A", A, M, K);
  check_operand("B", B, K, N);

  const bool bf16 = A.dtype == DType::BF16 || B.dtype == DType::BF16;
  if (backend == GemmBackend::Auto) backend = choose_backend(M, N, K, bf16);
  if (backend == GemmBackend::Reference) {
    reference_gemm(M, N, K, alpha, A, B, beta, C, ldc);
    return;
  }
  if (backend == GemmBackend::Small) {
    ZAYA_CHECK(!bf16, "the small GEMM backend is fp32 only; got A ", dtype_name(A.dtype), ", B ",
               dtype_name(B.dtype));
    gemm_small_f32(M, N, K, alpha, A, B, beta, C, ldc);
    return;
  }
  if (backend == GemmBackend::OpenBlas) {
    openblas_gemm(M, N, K, alpha, A, B, beta, C, ldc);
    return;
  }
  if (backend == GemmBackend::RowInvariant) {
    gemm_rows(M, N, K, alpha, A, B, beta, C, ldc, gemm_threads(2.0 * M * N * K));
    return;
  }
  MatRef a = A, b = B;
  if (bf16 && gemm_bf16_widens(M, N)) {
    // No (fast) bf16 matmul in oneDNN here: the same bf16 values in fp32, products exact, fp32 accumulation.
    // A transposed (weight gradients, dYᵀ·X) is copied untransposed: see to_f32_of_bf16_transposed.
    a = a.trans ? to_f32_of_bf16_transposed(a, K, M, t_f32_a) : to_f32_of_bf16(a, M, K, t_f32_a);
    b = to_f32_of_bf16(b, b.trans ? N : K, b.trans ? K : N, t_f32_b);
  } else if (bf16) {
    if (a.dtype == DType::F32) a = to_bf16(a, a.trans ? K : M, a.trans ? M : K, t_bf16_a);
    if (b.dtype == DType::F32) b = to_bf16(b, b.trans ? N : K, b.trans ? K : N, t_bf16_b);
  }
  onednn_gemm(backend == GemmBackend::OneDnnRuntimeM || backend == GemmBackend::OneDnnRuntimeMK,
              backend == GemmBackend::OneDnnRuntimeMK, M, N, K, alpha, a, b, beta, C, ldc);
}

void gemm(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B, float beta,
          float* C, int64_t ldc) {
  gemm_with(GemmBackend::Auto, M, N, K, alpha, A, B, beta, C, ldc);
}

void set_gemm_batch_invariant(bool on) {
  g_batch_invariant.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool gemm_batch_invariant() {
  return batch_invariant_now();
}

bool gemm_onednn_bf16() {
  return bf16_mode() != kBf16Widened;
}

bool gemm_bf16_widens(int64_t M, int64_t N) {
  const int mode = bf16_mode();
  return mode == kBf16Widened || (mode == kBf16ByShape && M >= kWidenBf16MinDim && N >= kWidenBf16MinDim);
}

const char* gemm_bf16_summary() {
  switch (bf16_mode()) {
    case kBf16OneDnn:
      return "oneDNN bf16 matmul";
    case kBf16ByShape:
      return "oneDNN bf16 matmul below 32 rows or columns, operands widened to fp32 above (oneDNN's fp32 "
             "matmul is faster on this CPU: no AMX, vdpbf16ps at the fma's products per cycle)";
    default:
      return "operands widened to fp32 (oneDNN has no bf16 matmul on this CPU, or ZAYA_ONEDNN_BF16=0)";
  }
}

void set_gemm_onednn_bf16(bool on) {
  g_onednn_bf16.store(on ? default_bf16_mode() : kBf16Widened, std::memory_order_release);
}

int64_t gemm_cached_primitives() {
  return primitive_cache().size();
}

void linear_forward(float* out, const float* in, const Tensor& W, const float* bias, int64_t M) {
  ZAYA_CHECK(W.ndim() == 2, "linear_forward: weight must be 2-D [out, in], got shape ", shape_str(W.shape));
  const int64_t N = W.dim(0), K = W.dim(1);
  if (is_quantized(W.dtype)) {
    quant_linear_forward(out, N, in, M, W);
  } else {
    ZAYA_CHECK(W.dtype == DType::F32 || W.dtype == DType::BF16,
               "linear_forward: weight must be F32, BF16 or quantized, got ", dtype_name(W.dtype));
    gemm(M, N, K, 1.0f, mat(in, K), mat(W, K, /*trans=*/true), 0.0f, out, N);
  }
  if (bias == nullptr || M == 0 || N == 0) return;
  const int nt = M * N >= (int64_t(1) << 16) ? threads_here() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float* row = out + m * N;
    for (int64_t n = 0; n < N; n++) row[n] += bias[n];
  }
}

double measure_gemm_peak_gflops(DType dtype) {
  ZAYA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "GEMM peak is measured for F32 or BF16, not ",
             dtype_name(dtype));
  // The Linear layout (B transposed) at 2048^3: large enough to reach the compute roof, ~50-100 ms a run.
  const int64_t n = 2048;
  Tensor a = Tensor::empty(dtype, {n, n}), b = Tensor::empty(dtype, {n, n});
  Tensor c = Tensor::empty(DType::F32, {n, n});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (Tensor* t : {&a, &b}) {
    for (int64_t i = 0; i < t->numel(); i++) {
      if (dtype == DType::F32) {
        t->f32()[i] = dist(rng);
      } else {
        t->bf16()[i] = f32_to_bf16(dist(rng));
      }
    }
  }
  // The machine's peak: the default mode's backend even while the batch-invariant mode is on.
  const GemmBackend backend = choose_fast_backend(n, n, n, dtype == DType::BF16);
  auto run = [&] { gemm_with(backend, n, n, n, 1.0f, mat(a, n), mat(b, n, true), 0.0f, c.f32(), n); };
  // Warm up for a quarter of a second, not one call: besides primitive creation and page faults, the cores
  // ramp up over the first ~0.1-0.2 s of full load (Zen 5 VM, 2026-12-05: bf16 runs 1-2 at 520-580 GFLOP/s,
  // then 680-760; fp32 250-300 for three runs, then 350-390). With one warm-up call and the best of 4 the
  // peak read 470-640 instead of 700-760 when nothing had run before it, inflating the MFU of `zaya bench`.
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  const auto warm0 = clock::now();
  do run();
  while (seconds_since(warm0) < 0.25);
  // Then the best of at least 5 calls and 0.5 s (a busy neighbour slows single calls, never speeds one up).
  double best = 1e30;
  const auto meas0 = clock::now();
  for (int rep = 0; rep < 5 || seconds_since(meas0) < 0.5; rep++) {
    const auto t0 = clock::now();
    run();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * double(n) * n * n / best * 1e-9;
}

}  // namespace zaya
