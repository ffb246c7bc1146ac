// Small element-wise ops of the ZAYA1 block: residual scaling (spec §5.1, §6.3), activations.
#pragma once

#include <cstdint>

namespace zaya {

// Learned residual scaling: out[N,H] = (o + hb) ⊙ hs + (r + rb) ⊙ rs. `out` may alias `o` or `r`.
void residual_scale_forward(float* out, const float* o, const float* r, const float* hb, const float* hs,
                            const float* rb, const float* rs, int64_t N, int64_t H);

// Exact (erf) GELU of the router: y = x·Φ(x), in place over n values.
void gelu_forward(float* x, int64_t n);

// SwiGLU of the experts: out[N,I] = silu(gu[:, :I]) ⊙ gu[:, I:], gu is [N, 2I].
void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t I);

// Row-wise softmax in place over [N, D].
void softmax_forward(float* x, int64_t N, int64_t D);

}  // namespace zaya
