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

// ---- Backward (spec §6) ----

// Residual scaling backward (§6.3): d_o[N,H] = dout ⊙ hs; d_r[N,H] = dout ⊙ rs (added into d_r when
// `accumulate_dr`, the block input feeds two consumers); dhb/dhs/drb/drs[H] += the sums over rows.
// o and r are the forward inputs. d_o may alias dout.
void residual_scale_backward(float* d_o, float* d_r, float* dhb, float* dhs, float* drb, float* drs,
                             const float* dout, const float* o, const float* r, const float* hb,
                             const float* hs, const float* rb, const float* rs, int64_t N, int64_t H,
                             bool accumulate_dr);

// Exact GELU backward: dx[n] = dy[n] · (Φ(x) + x·φ(x)), x the pre-activation. dx may alias dy.
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n);

// SwiGLU backward: dgate_up[N, 2I] from dout[N, I] and the forward input gate_up[N, 2I]:
//   ḡa = ḡψ ⊙ b ⊙ σ(a)(1 + a(1 − σ(a))),  ḡb = ḡψ ⊙ silu(a)   (spec §6.11).
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t I);

// Row softmax backward: dx[N,D] = y ⊙ (dy − rowsum(dy ⊙ y)), y the softmax output. dx may alias dy.
void softmax_backward(float* dx, const float* dy, const float* y, int64_t N, int64_t D);

}  // namespace zaya
