// The GEMM seam: every matrix product of the model goes through gemm(). The CPU backend picks oneDNN or
// OpenBLAS per dtype/shape (kernels/gemm.cpp); a CUDA/HIP backend replaces this one file.
//
//   C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C        C is fp32 with row stride ldc
//
// op(X) = X, or Xᵀ when `trans` is set (X then stored transposed, row-major, row stride ld).
// A Linear layer y = x·Wᵀ is gemm(M=tokens, N=out, K=in, A={x}, B={W, trans}).
// When either operand is BF16, both are used in BF16 (an fp32 operand is rounded to bf16 into a scratch
// buffer) with fp32 accumulation; otherwise the product is fp32.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace zaya {

struct MatRef {
  const void* data = nullptr;
  DType dtype = DType::F32;  // F32 or BF16
  int64_t ld = 0;            // row stride in elements of the stored (possibly transposed) matrix
  bool trans = false;
};

inline MatRef mat(const float* p, int64_t ld, bool trans = false) {
  return {p, DType::F32, ld, trans};
}
inline MatRef mat(const Tensor& t, int64_t ld, bool trans = false) {
  return {t.data, t.dtype, ld, trans};
}

// beta == 0 overwrites C without reading it (NaN in C does not propagate). M, N or K may be 0 (K == 0 or
// alpha == 0 gives C = beta*C). ld must cover the stored row (ld >= stored columns); violations throw.
// Thread-safe; inside an OpenMP parallel region it runs on the calling thread only.
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B, float beta,
          float* C, int64_t ldc);

// The backends behind gemm(), selectable for tests and benchmarks. Auto is what gemm() does.
//   OneDnn         oneDNN matmul, every dim fixed in the primitive (one primitive per shape, cached)
//   OneDnnRuntimeM oneDNN matmul with M a runtime dim (one primitive for all M of an N,K shape)
//   OneDnnRuntimeMK oneDNN matmul with M and K runtime dims (one primitive for all M, K of an N: weight
//                  gradients over a varying token count K, e.g. per expert)
//   Small          zaya's own fp32 kernel for tiny products (kernels/gemm_small.h; fp32 only): deterministic
//                  by construction, independent of OPENBLAS_CORETYPE
//   OpenBlas       cblas_sgemm, single-threaded calls split over the OpenMP threads (fp32 only; its kernel
//                  follows OPENBLAS_CORETYPE, so Auto never chooses it: a benchmark and cross-check)
//   RowInvariant   zaya's batch-invariant kernel (kernels/gemm_rows.h; fp32 and bf16): every element's sum
//                  over k has one fixed order, so a row's result depends only on that row of op(A), on B,
//                  alpha, beta and that row of C; Auto chooses it for everything while
//                  set_gemm_batch_invariant is on
//   Reference      plain loops with fp32 accumulation (slow; a cross-check, never chosen by Auto)
enum class GemmBackend {
  Auto,
  OneDnn,
  OneDnnRuntimeM,
  OneDnnRuntimeMK,
  Small,
  OpenBlas,
  Reference,
  RowInvariant
};
const char* gemm_backend_name(GemmBackend backend);

// gemm() on a chosen backend; Small or OpenBlas with a BF16 operand throws.
void gemm_with(GemmBackend backend, int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A,
               const MatRef& B, float beta, float* C, int64_t ldc);

// Batch invariance (serving, issue 13). While on, gemm() (and gemm_with(Auto), so linear_forward and the
// grouped expert GEMMs) computes every product on the RowInvariant backend: row r of C is then bitwise a
// function of row r of op(A), of op(B), alpha, beta and row r of C alone: never of M, of the other rows, of
// the thread count or of whether the call runs inside an OpenMP parallel region. A continuous-batching
// server needs this so a sequence's logits do not depend on what else shares its batch. Off, gemm() picks
// the fastest backend per shape (whose row results can change with M). Process-wide; flip it only while no
// gemm() call is in flight. The default is off; `ZAYA_BATCH_INVARIANT=1` in the environment turns it on at
// start-up (read once, by the first call of either function or of gemm()).
void set_gemm_batch_invariant(bool on);
bool gemm_batch_invariant();

// Whether bf16 products on the oneDNN backends run as oneDNN bf16 matmuls (all of them, or those with few
// rows). oneDNN 2.x builds those only on AVX-512 CPUs; on AVX2-only ones (AMD Zen 3, Intel before
// Skylake-SP) they would fail, so there both operands are widened to fp32 (the same bf16 values, exactly;
// products of two bf16 are exact in fp32) and take oneDNN's fp32 matmul: a bf16 product's result up to the
// order of the fp32 sums, at fp32 speed. On AVX-512 CPUs without a fast bf16 matmul (cpu_fast_bf16_matmul:
// an Intel Xeon whose AMX is absent or hidden) products of kWidenBf16MinDim+ rows and columns widen too
// (1.4-2.0x faster there; fewer rows keep oneDNN's bf16 matmul, whose weights need no widening per call).
// Probed once (a 1x1x1 bf16 primitive); `ZAYA_ONEDNN_BF16=0` in the environment widens every bf16 product,
// `ZAYA_ONEDNN_BF16=1` widens none where oneDNN has bf16 (anything else: this CPU's default).
constexpr int64_t kWidenBf16MinDim = 32;
bool gemm_onednn_bf16();
// Whether gemm() widens a bf16 M x N product (of any K) to fp32 on the oneDNN backends now.
bool gemm_bf16_widens(int64_t M, int64_t N);
// One line for `zaya --version`: how bf16 products run on this CPU.
const char* gemm_bf16_summary();
// Tests: false widens every bf16 oneDNN product; true restores this CPU's default. Flip it only while no
// gemm() call is in flight.
void set_gemm_onednn_bf16(bool on);

// Number of oneDNN primitives currently held by gemm()'s cache (for tests and diagnostics).
int64_t gemm_cached_primitives();

// Linear forward: out[M,N] = in[M,K] · W[N,K]ᵀ (+ bias[N]). W may be F32 or BF16; bias is F32 or null.
void linear_forward(float* out, const float* in, const Tensor& W, const float* bias, int64_t M);

// Measured peak of this machine's GEMM backend in GFLOP/s (2048^3 products, all threads, the best call after
// a 0.25 s warm-up; ~0.75 s a dtype).
double measure_gemm_peak_gflops(DType dtype);

}  // namespace zaya
