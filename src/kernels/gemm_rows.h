// The batch-invariant kernel behind gemm()'s RowInvariant backend (gemm.h: set_gemm_batch_invariant).
//
//   C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C       (gemm.h's contract; beta == 0 never reads C)
//
// Every element of C is computed by one fixed sequence of operations that depends only on K, on the
// operands' dtypes and on B's layout; never on M, N, the element's position, the tiling or the thread count.
// So row r of C is a function of row r of op(A), of op(B), alpha, beta and row r of C alone: adding rows
// to a product (more tokens in a batch) cannot change another row's bits. The orders:
//   fp32, B stored [N, K] (the Linear layout x·Wᵀ): gemm_small.h's dot form: 16 lane chains, lane l over
//     k ≡ l (mod 16) in increasing k (fused multiply-add), then the tree (l + 8, l + 4, l + 2, l + 1);
//     bitwise what GemmBackend::Small computes.
//   bf16 (either operand BF16; an fp32 operand is rounded to bf16 first, as every backend does), B stored
//     [N, K]: vdpbf16ps lanes: lane l over the pairs (32j + 2l, 32j + 2l + 1), j increasing (per pair the
//     instruction adds the product at 2l + 1, then at 2l, each exact product rounded into the fp32 lane,
//     denormals flushed), then the same tree.
//   B stored [K, N] (fp32, or bf16 widened exactly to fp32): gemm_small.h's broadcast form: one fused
//     multiply-add chain over k = 0 .. K-1 in order.
//   then alpha * sum, and fma(beta, C, alpha * sum) when beta != 0.
// C is split into tiles of rows x columns spread over `threads` OpenMP threads (1 inside a parallel region
// or for small products): the split changes which thread computes an element, never how.
//
// Without AVX512_BF16 the bf16 dot form runs an emulation of the same order (on AVX2 vectors where the CPU
// has them, else scalar; denormal products and sums are not flushed there, so its bits can differ from the
// vdpbf16ps path in those cases; on a given build the path is fixed, so invariance holds either way).
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace zaya {

// A and B: F32 or BF16 in any mix (sizes and strides already checked by gemm_with); threads >= 1.
void gemm_rows(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B, float beta,
               float* C, int64_t ldc, int threads);

}  // namespace zaya
