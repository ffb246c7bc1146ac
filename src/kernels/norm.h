// RMSNorm (spec §5.2, backward §6.4): y = g ⊙ x · (mean(x²) + eps)^(-1/2), statistics in fp32, no (1 + g).
#pragma once

#include <cstdint>

namespace zaya {

// out[N,D] = rmsnorm(in[N,D]) * g[D]; rstd[N] (optional) receives (mean(x²)+eps)^(-1/2) for the backward.
// `out` may alias `in`.
void rmsnorm_forward(float* out, float* rstd, const float* in, const float* g, int64_t N, int64_t D,
                     float eps);

// din[N,D] (+)= ∂L/∂in; dg[D] += ∂L/∂g. `accumulate` adds into din instead of overwriting it.
void rmsnorm_backward(float* din, float* dg, const float* dout, const float* in, const float* g,
                      const float* rstd, int64_t N, int64_t D, bool accumulate);

}  // namespace zaya
