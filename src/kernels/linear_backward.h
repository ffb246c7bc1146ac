// Backward of a Linear layer y = x·Wᵀ (+ b) through the GEMM seam (spec §6: dX = dY·W, dW += dYᵀ·X).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace zaya {

// y[M,N] = x[M,K]·W[N,K]ᵀ (+ b[N]):
//   dx[M,K] = dy·W, or += when `accumulate` (dx nullable: no input gradient)
//   dW[N,K] += dyᵀ·x (fp32 accumulation)     db[N] += Σ_rows dy (db nullable: no bias)
// W may be F32 or BF16 (then dy and x are rounded to bf16 for both products, as every bf16 GEMM does).
void linear_backward(float* dx, bool accumulate, float* dW, float* db, const float* dy, const float* x,
                     const Tensor& W, int64_t M);

}  // namespace zaya
