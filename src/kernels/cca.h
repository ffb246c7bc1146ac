// Compressed Convolutional Attention pieces (spec §5.5 b-f): the two causal convolutions over raw q/k
// frames, the q/k mean mixing, QK normalisation with key temperature, and partial NeoX RoPE.
// All per sequence row; frames are row-major [time, C].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zaya {

struct CcaDims {
  int64_t Hq, Hk, d;  // query heads, kv heads, head dim
  int64_t t0, t1;     // depthwise and grouped kernel sizes
  int64_t A() const { return Hq * d; }
  int64_t Kv() const { return Hk * d; }
  int64_t C() const { return A() + Kv(); }
  int64_t P() const { return (t0 - 1) + (t1 - 1); }
};

// The grouped convolution's weights re-laid for inference (pack_decode_weights): per group g,
//   w[g][k][c] = w1[(g·d + c)·K + k]   (K = d·t1 inputs of each of the group's d outputs),
// so that 16 outputs of a group share a vector and each position's input is one broadcast. bf16 when every
// weight is a bf16 value (a bf16 checkpoint's: widening back is exact; half the 1.3 MB a ZAYA1-8B layer
// reads per decode step), fp32 otherwise; none (empty) without AVX-512 or when d is not a multiple of 16.
struct CcaConvPack {
  int64_t groups = 0, d = 0, K = 0;
  std::vector<uint16_t> bf16;  // [groups][K][d], or empty
  std::vector<float> f32;      // [groups][K][d], or empty
  bool empty() const { return bf16.empty() && f32.empty(); }
  size_t bytes() const { return bf16.size() * sizeof(uint16_t) + f32.size() * sizeof(float); }
};
CcaConvPack cca_conv_pack(const float* w1, int64_t C, int64_t d, int64_t t1);

// Both causal convolutions (§5.5b) for S new tokens.
//   frames[P+S, C]: the P previous raw frames (zeros on a fresh sequence) then the S new raw frames U.
//   mid[S+t1-1, C]: scratch, the depthwise outputs m_σ, σ = -(t1-1) … S-1.
//   out[S, C]:      grouped-conv outputs c_t.
// w0 [C, 1, t0], b0 [C], w1 [C, d, t1], b1 [C] (groups = Hq + Hk, one per head).
// pack (nullable): w1 re-laid (cca_conv_pack), taken where the dot form would be (the same bits as the
// batched decode call with that pack).
void cca_conv_forward(float* out, float* mid, const float* frames, const float* w0, const float* b0,
                      const float* w1, const float* b1, int64_t S, const CcaDims& dm,
                      const CcaConvPack* pack = nullptr);

// The same convolutions in steps, for callers that batch the grouped one over many sequences (decode):
//   cca_depthwise_forward: mid[S+t1-1, C] from frames[P+S, C] (the first half of cca_conv_forward).
//   cca_conv_taps: taps[S, groups, d·t1], the grouped convolution's inputs side by side per group,
//     taps[t, g, c'·t1 + j] = mid[t + j, g·d + c'] (groups = Hq + Hk).
//   cca_grouped_taps_forward: out[T, C] = b1 + the grouped convolution of T positions' taps[T, groups, d·t1]
//     (any number of sequences); dot_form: one dot_f32 per output over w1's row (cca_conv_dot_form(S) says
//     which form cca_conv_forward takes for S positions; each output's bits are the same either way of
//     batching), or, given a pack (non-empty), one fma chain per output over k = 0 … K-1 in order with 16
//     outputs in a vector's lanes (bits that do not depend on T either); else zaya's small GEMM (a fixed
//     order per element whatever T).

void cca_depthwise_forward(float* mid, const float* frames, const float* w0, const float* b0, int64_t S,
                           const CcaDims& dm);
void cca_conv_taps(float* taps, const float* mid, int64_t S, const CcaDims& dm);
void cca_grouped_taps_forward(float* out, const float* taps, const float* w1, const float* b1, int64_t T,
                              bool dot_form, const CcaDims& dm, const CcaConvPack* pack = nullptr);
bool cca_conv_dot_form(int64_t S);

// q/k mean mixing, QK norm, temperature and RoPE, in place on conv[S, C] (§5.5 c-e):
//   conv[:, :A] becomes Q'[S, Hq, d], conv[:, A:] becomes K'[S, Hk, d].
//   raw[S, C] = U (the unconvolved projections [Q0 | K0]); temp[Hk]; positions[S] absolute.
//   rotary_dim r (even, <= d), theta. norm_q/norm_k (optional, [S,Hq] / [S,Hk]) receive ‖Q̃‖, ‖K̃‖.
void cca_qk_forward(float* conv, const float* raw, const float* temp, const int64_t* positions, int64_t S,
                    const CcaDims& dm, int64_t rotary_dim, double theta);

// RoPE on one head vector x[d] at position pos (partial NeoX pairs (i, i + r/2), i < r/2).
void rope_apply(float* x, int64_t pos, int64_t rotary_dim, const float* inv_freq);
// The same in two steps, for many heads at one position: the angles' cos / sin [r/2] (fp32 cos and sin of
// float(pos) · inv_freq[i], as rope_apply), then the rotation of one head vector with them (the same bits).
void rope_angles(float* cos_out, float* sin_out, int64_t pos, int64_t rotary_dim, const float* inv_freq);
void rope_rotate(float* x, const float* cos_in, const float* sin_in, int64_t rotary_dim);
// inv_freq[r/2] = theta^(-2i/r), computed in fp32 as the reference does.
void rope_inv_freq(float* inv_freq, int64_t rotary_dim, double theta);

// ---- Backward (spec §6.6-6.9), one sequence row ----

// The inverse rotation of rope_apply (spec §6.6): maps ḡx' to ḡx in place on one head vector g[d].
void rope_apply_inverse(float* g, int64_t pos, int64_t rotary_dim, const float* inv_freq);
// The same with the position's angles from rope_angles (the same bits), for many heads at one position.
void rope_rotate_inverse(float* g, const float* cos_in, const float* sin_in, int64_t rotary_dim);

// Backward of cca_qk_forward (mixing, QK norm with temperature incl. the clamp branch, RoPE; §6.6-6.8).
//   dmixed[S, C]  out: ḡQ̃ | ḡK̃ (= the gradient of the conv output, spec §6.8 ḡCq, ḡCk)
//   draw[S, C]    += the mixing path's gradient of the raw frames U = [Q0 | K0]
//   dtemp[Hk]     += ḡτ
//   dqk[S, C]     ḡQ' | ḡK' (gradient of cca_qk_forward's output)
//   conv[S, C]    the conv output before mixing (cca_conv_forward's out); raw[S, C] = U; temp, positions,
//                 rotary_dim, theta as in the forward.
void cca_qk_backward(float* dmixed, float* draw, float* dtemp, const float* dqk, const float* conv,
                     const float* raw, const float* temp, const int64_t* positions, int64_t S,
                     const CcaDims& dm, int64_t rotary_dim, double theta);

// Backward of cca_conv_forward (§6.9).
//   dframes[P+S, C]  out (overwritten): ḡ of every raw frame (rows < P are the cached/zero frames: constants,
//                    the caller uses rows P … P+S-1)
//   dw0[C, t0], db0[C], dw1[C, d, t1], db1[C]  += parameter gradients (db0 includes the σ < 0 intermediates)
//   dout[S, C]  ḡc; mid[S+t1-1, C] and frames[P+S, C] as recorded by the forward.
void cca_conv_backward(float* dframes, float* dw0, float* db0, float* dw1, float* db1, const float* dout,
                       const float* mid, const float* frames, const float* w0, const float* w1, int64_t S,
                       const CcaDims& dm);

}  // namespace zaya
