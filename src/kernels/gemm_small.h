// The fp32 kernel behind gemm() for tiny products (below 0.1 MFLOP: the test models, attention blocks of a
// few tokens), where a library call's fixed overhead dominates. Written here so
// that its results depend on nothing the environment selects: OpenBLAS's kernel for these shapes followed
// OPENBLAS_CORETYPE (Haswell vs the CPU's own: 1.57x slower at 64^3, last bits different).
//
//   C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C       (gemm.h's contract; beta == 0 never reads C)
//
// Deterministic by construction: an element's sum over k has one fixed order that depends only on K and the
// layout of B, then alpha * sum (+ beta * C):
//   B stored [K, N] (dY·W, dYᵀ·X): one fused multiply-add chain over k = 0 .. K-1 in order;
//   B stored [N, K] (the Linear layout x·Wᵀ): 16 lane chains, lane l over k ≡ l (mod 16) in order, then
//   a fixed tree (l + 8, l + 4, l + 2, l + 1): rows of A and B are read along k, no transposed copy.
// So a row's result does not depend on M, N, the element's position, the thread or the CPU; the AVX2 path
// (CPUs without AVX-512) and the scalar fallback compute the same bits. Single-threaded: tiny products do not pay for a fork.
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace zaya {

// A and B must be F32 (MatRef as in gemm.h; sizes and strides already checked by gemm_with).
void gemm_small_f32(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& A, const MatRef& B,
                    float beta, float* C, int64_t ldc);

}  // namespace zaya
