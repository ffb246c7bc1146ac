#include "kernels/cca.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/profile.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "kernels/gemm_small.h"
#include "kernels/vec_math.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 cast/convert intrinsics start from _mm512_undefined_*: false "uninitialized" warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace zaya {

void cca_depthwise_forward(float* mid, const float* frames, const float* w0, const float* b0, int64_t S,
                           const CcaDims& dm) {
  const int64_t C = dm.C(), t0 = dm.t0, t1 = dm.t1;
  const int64_t n_mid = S + t1 - 1;
  // m_σ[c] = b0[c] + Σ_j w0[c,j] · u_{σ-t0+1+j}[c]; frame τ lives at row τ + P of `frames`, and mid row
  // σ + (t1-1). Row σ=-(t1-1) reads frames rows 0 … t0-1.
  // Each m[c] is b0[c] followed by one fma per tap j in order (every path below: the same bits). ZAYA1-8B's
  // t0 = 2 reads its interleaved [c][j] weights as two vectors split into even and odd taps: the strided
  // scalar loop cost ~2 us a token and layer, ~20% of a batch-16 decode step's convolution.
  for (int64_t s = 0; s < n_mid; s++) {
    float* m = mid + s * C;
    int64_t c0 = 0;
#if defined(__AVX512F__)
    if (t0 == 2) {
      const float* u0 = frames + s * C;
      const float* u1 = frames + (s + 1) * C;
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      for (; c0 + 16 <= C; c0 += 16) {
        const __m512 wa = _mm512_loadu_ps(w0 + 2 * c0), wb = _mm512_loadu_ps(w0 + 2 * c0 + 16);
        __m512 acc = _mm512_loadu_ps(b0 + c0);
        acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(wa, even, wb), _mm512_loadu_ps(u0 + c0), acc);
        acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(wa, odd, wb), _mm512_loadu_ps(u1 + c0), acc);
        _mm512_storeu_ps(m + c0, acc);
      }
    }
#endif
    for (int64_t c = c0; c < C; c++) {
      float acc = b0[c];
      for (int64_t j = 0; j < t0; j++) acc += w0[c * t0 + j] * frames[(s + j) * C + c];  // contracted to fma
      m[c] = acc;
    }
  }
}

void cca_conv_taps(float* taps, const float* mid, int64_t S, const CcaDims& dm) {
  const int64_t C = dm.C(), d = dm.d, t1 = dm.t1, groups = dm.Hq + dm.Hk, K = d * t1;
  for (int64_t t = 0; t < S; t++)
    for (int64_t g = 0; g < groups; g++) {
      float* x = taps + (t * groups + g) * K;
      int64_t c0 = 0;
#if defined(__AVX512F__)
      if (t1 == 2) {  // ZAYA1-8B: two rows interleaved, 16 channels a step (the scalar loop: ~2 us a token
                      // and layer)
        const float* m0 = mid + t * C + g * d;
        const float* m1 = m0 + C;
        const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        for (; c0 + 16 <= d; c0 += 16) {
          const __m512 a = _mm512_loadu_ps(m0 + c0), b = _mm512_loadu_ps(m1 + c0);
          _mm512_storeu_ps(x + 2 * c0, _mm512_permutex2var_ps(a, lo, b));
          _mm512_storeu_ps(x + 2 * c0 + 16, _mm512_permutex2var_ps(a, hi, b));
        }
      }
#endif
      for (int64_t c = c0; c < d; c++)
        for (int64_t j = 0; j < t1; j++) x[c * t1 + j] = mid[(t + j) * C + g * d + c];
    }
}

CcaConvPack cca_conv_pack(const float* w1, int64_t C, int64_t d, int64_t t1) {
  CcaConvPack p;
#if defined(__AVX512F__)
  if (d <= 0 || d % 16 != 0 || C % d != 0) return p;
  p.groups = C / d;
  p.d = d;
  p.K = d * t1;
  const size_t n = size_t(C * p.K);
  bool bf16 = true;
  for (size_t i = 0; i < n && bf16; i++) {
    uint32_t bits;
    std::memcpy(&bits, w1 + i, 4);
    bf16 = (bits & 0xFFFFu) == 0;
  }
  if (bf16)
    p.bf16.resize(n);
  else
    p.f32.resize(n);
  for (int64_t g = 0; g < p.groups; g++)
    for (int64_t k = 0; k < p.K; k++)
      for (int64_t c = 0; c < d; c++) {
        const size_t dst = size_t((g * p.K + k) * d + c);
        const float w = w1[(g * d + c) * p.K + k];
        if (bf16) {
          uint32_t bits;
          std::memcpy(&bits, &w, 4);
          p.bf16[dst] = uint16_t(bits >> 16);
        } else {
          p.f32[dst] = w;
        }
      }
#else
  (void)w1, (void)C, (void)d, (void)t1;
#endif
  return p;
}

namespace {

#if defined(__AVX512F__)
inline __m512 load_w16(const float* w) {
  return _mm512_loadu_ps(w);
}
inline __m512 load_w16(const uint16_t* w) {  // bf16 -> fp32, exact
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))), 16));
}

// out[t0 + m, g·d + o0 + 16v + lane] for m < MR, v < NV: one fma chain over k = 0 … K-1 per output, from 0,
// then + b1. W = the pack's group g [K][d]; x = taps of position t0, group g (stride ldx between positions).
template <typename W, int NV, int MR>
void conv_lanes_block(float* out, int64_t ldo, const W* w, int64_t d, const float* x, int64_t ldx, int64_t K,
                      const float* b1) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; m++)
    for (int v = 0; v < NV; v++) acc[m][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k++, w += d) {
    __m512 wv[NV];
    for (int v = 0; v < NV; v++) wv[v] = load_w16(w + 16 * v);
    for (int m = 0; m < MR; m++) {
      const __m512 a = _mm512_set1_ps(x[m * ldx + k]);
      for (int v = 0; v < NV; v++) acc[m][v] = _mm512_fmadd_ps(wv[v], a, acc[m][v]);
    }
  }
  for (int m = 0; m < MR; m++)
    for (int v = 0; v < NV; v++)
      _mm512_storeu_ps(out + m * ldo + 16 * v, _mm512_add_ps(acc[m][v], _mm512_loadu_ps(b1 + 16 * v)));
}

// Group g's outputs for all T positions: blocks of NV vectors of outputs (NV = 8: ZAYA1-8B's 128 in one) by
// up to 3 positions (24 accumulators); a block's weights come from L2 after the first.
template <typename W, int NV>
void conv_lanes_group(float* out, const float* taps, const W* w, const float* b1, int64_t T, int64_t g,
                      const CcaConvPack& p) {
  const int64_t d = p.d, K = p.K, C = p.groups * d, ldx = p.groups * K;
  for (int64_t o0 = 0; o0 < d; o0 += 16 * NV) {
    const W* wo = w + o0;
    const float* bo = b1 + g * d + o0;
    int64_t t = 0;
    for (; t + 3 <= T; t += 3)
      conv_lanes_block<W, NV, 3>(out + t * C + g * d + o0, C, wo, d, taps + t * ldx + g * K, ldx, K, bo);
    if (T - t == 2)
      conv_lanes_block<W, NV, 2>(out + t * C + g * d + o0, C, wo, d, taps + t * ldx + g * K, ldx, K, bo);
    if (T - t == 1)
      conv_lanes_block<W, NV, 1>(out + t * C + g * d + o0, C, wo, d, taps + t * ldx + g * K, ldx, K, bo);
  }
}

template <typename W>
void conv_lanes(float* out, const float* taps, const W* w, const float* b1, int64_t T, const CcaConvPack& p) {
  const int64_t d = p.d, K = p.K;
  parallel_for_static(p.groups, T * p.groups * d * K > (int64_t(1) << 17), [&](int64_t g) {
    const W* wg = w + g * K * d;
    if (d % 128 == 0)
      conv_lanes_group<W, 8>(out, taps, wg, b1, T, g, p);
    else if (d % 64 == 0)
      conv_lanes_group<W, 4>(out, taps, wg, b1, T, g, p);
    else if (d % 32 == 0)
      conv_lanes_group<W, 2>(out, taps, wg, b1, T, g, p);
    else
      conv_lanes_group<W, 1>(out, taps, wg, b1, T, g, p);
  });
}
#endif

}  // namespace

void cca_grouped_taps_forward(float* out, const float* taps, const float* w1, const float* b1, int64_t T,
                              bool dot_form, const CcaDims& dm, const CcaConvPack* pack) {
  const int64_t C = dm.C(), d = dm.d, groups = dm.Hq + dm.Hk, K = d * dm.t1;
#if defined(__AVX512F__)
  if (dot_form && pack && !pack->empty()) {
    ZAYA_ASSERT(pack->groups == groups && pack->d == d && pack->K == K, "the pack must be made from this w1");
    if (!pack->bf16.empty())
      conv_lanes(out, taps, pack->bf16.data(), b1, T, *pack);
    else
      conv_lanes(out, taps, pack->f32.data(), b1, T, *pack);
    return;
  }
#endif
  if (dot_form) {
    // Every (output, position) pair as dot_f32 of the output's weight row (d·t1 floats) with the position's
    // taps (dot_f32_grid, the same bits): the weights are read once per call, however many sequences share
    // it.
    parallel_for_static(groups, T * C * K > (int64_t(1) << 17), [&](int64_t g) {
      dot_f32_grid(out + g * d, C, w1 + g * d * K, K, d, taps + g * K, groups * K, T, K);
      for (int64_t t = 0; t < T; t++)
        for (int64_t o = g * d; o < (g + 1) * d; o++) out[t * C + o] += b1[o];
    });
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) if (T * C * K > (int64_t(1) << 18))
  for (int64_t g = 0; g < groups; g++) {
    gemm_small_f32(T, d, K, 1.f, mat(taps + g * K, groups * K), mat(w1 + g * d * K, K, /*trans=*/true), 0.f,
                   out + g * d, C);
  }
  for (int64_t t = 0; t < T; t++)
    for (int64_t o = 0; o < C; o++) out[t * C + o] += b1[o];
}

void cca_conv_forward(float* out, float* mid, const float* frames, const float* w0, const float* b0,
                      const float* w1, const float* b1, int64_t S, const CcaDims& dm,
                      const CcaConvPack* pack) {
  ZAYA_PROFILE_SCOPE("cca_conv");
  const int64_t C = dm.C(), d = dm.d, t1 = dm.t1;
  cca_depthwise_forward(mid, frames, w0, b0, S, dm);
  // Grouped: c_t[o] = b1[o] + Σ_j Σ_c' W1[o,c',j] · m_{t-t1+1+j}[g(o)·d + c']; mid row of m_{t-t1+1+j} = t +
  // j. Per group g and tap j this is a GEMM: out[:, g·d:(g+1)·d] += mid[j : j+S, g·d:(g+1)·d] · W1[g·d:…, :,
  // j]ᵀ, with the tap-major weights w1t[j][o][c'] re-laid from [o][c'][j].
  const int64_t groups = dm.Hq + dm.Hk;
  // Decode and short chunks: per group, the taps' inputs side by side and dot products over the weights as
  // stored ([o][c'][j], rows of d·t1; cca_grouped_taps_forward). Below 16 positions one dot_f32 per output
  // (a GEMM per group and tap would be all call overhead; strided scalar loops over ZAYA1-8B's 1.3 MB of
  // conv weights cost 0.3 ms a layer), or with an inference pack its output-lanes chains instead. In
  // batch-invariant mode (gemm.h) every call takes zaya's small kernel, so that a position's output does not
  // depend on how many positions share the call (prefill chunks are cut by the scheduler's token budget,
  // which depends on the other sequences): a fixed order per element over the d·t1 terms, whatever S
  // (gemm_small.h), with no re-laid weights and no dispatch (a decode step's convolution ran a 330 kB weight
  // transpose, a parallel region and 20 gemm() calls per layer: 236 vs 50 us a call for mid.json). Outside
  // that mode the small kernel serves chunks below 64 positions too (the re-laid weights and per-tap GEMMs
  // below cost more there: the 20-token continuations of `zaya eval run`'s shared-context scoring).
  if (gemm_batch_invariant() || S < 64) {
    thread_local std::vector<float> taps;  // [S, groups, d·t1]
    taps.resize(size_t(S * groups * d * t1));
    cca_conv_taps(taps.data(), mid, S, dm);
    cca_grouped_taps_forward(out, taps.data(), w1, b1, S, cca_conv_dot_form(S), dm, pack);
    return;
  }
  std::vector<float> w1t(t1 * C * d);  // shared by the threads below (a thread_local would not be)
  for (int64_t o = 0; o < C; o++)
    for (int64_t c = 0; c < d; c++)
      for (int64_t j = 0; j < t1; j++) w1t[(j * C + o) * d + c] = w1[(o * d + c) * t1 + j];
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < groups; g++) {
    for (int64_t j = 0; j < t1; j++) {
      gemm(S, d, d, 1.f, mat(mid + j * C + g * d, C),
           mat(w1t.data() + (j * C + g * d) * d, d, /*trans=*/true), j == 0 ? 0.f : 1.f, out + g * d, C);
    }
  }
  for (int64_t t = 0; t < S; t++)
    for (int64_t o = 0; o < C; o++) out[t * C + o] += b1[o];
}

bool cca_conv_dot_form(int64_t S) {
  return !gemm_batch_invariant() && S < 16;
}

void rope_inv_freq(float* inv_freq, int64_t r, double theta) {
  // Reference: 1 / (theta ** (arange(0, r, 2, int64).float() / r)) in fp32.
  for (int64_t i = 0; i < r / 2; i++) {
    float expo = float(2 * i) / float(r);
    inv_freq[i] = 1.0f / std::pow(float(theta), expo);
  }
}

void rope_angles(float* cos_out, float* sin_out, int64_t pos, int64_t r, const float* inv_freq) {
  for (int64_t i = 0; i < r / 2; i++) {
    const float phi = float(pos) * inv_freq[i];
    cos_out[i] = std::cos(phi);
    sin_out[i] = std::sin(phi);
  }
}

void rope_rotate(float* x, const float* cos_in, const float* sin_in, int64_t r) {
  const int64_t half = r / 2;
  for (int64_t i = 0; i < half; i++) {
    const float c = cos_in[i], s = sin_in[i];
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

void rope_apply(float* x, int64_t pos, int64_t r, const float* inv_freq) {
  const int64_t half = r / 2;
  for (int64_t i = 0; i < half; i++) {
    const float phi = float(pos) * inv_freq[i];
    const float c = std::cos(phi), s = std::sin(phi);
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

void cca_qk_forward(float* conv, const float* raw, const float* temp, const int64_t* positions, int64_t S,
                    const CcaDims& dm, int64_t rotary_dim, double theta) {
  ZAYA_PROFILE_SCOPE("cca_qk_rope");
  const int64_t Hq = dm.Hq, Hk = dm.Hk, d = dm.d, A = dm.A(), C = dm.C(), G = Hq / Hk;
  const float sqrt_d = std::sqrt(float(d));
  const float eps_q = 1.1920928955078125e-07f;  // fp32 machine epsilon: the reference's clamp (spec §5.5d)
  // The frequencies and a position's rotation are the same in every layer: each thread keeps the last ones it
  // computed (a decode token's 40 layers computed the same 32 powf, cosf and sinf 40 times: ~0.3 ms a step).
  thread_local std::vector<float> inv_freq;
  thread_local int64_t freq_dim = -1;
  thread_local double freq_theta = 0;
  if (freq_dim != rotary_dim || freq_theta != theta) {
    inv_freq.assign(size_t(rotary_dim / 2 + 1), 0.f);
    rope_inv_freq(inv_freq.data(), rotary_dim, theta);
    freq_dim = rotary_dim, freq_theta = theta;
  }
  const float* freq = inv_freq.data();  // the calling thread's (thread_local: not what other threads see)
  parallel_for_static(S, S * C > 65536, [&](int64_t t) {
    float* row = conv + t * C;
    const float* u = raw + t * C;
    thread_local std::vector<float> qr, cs, sn;
    thread_local int64_t angles_pos = -1, angles_dim = -1;
    thread_local double angles_theta = 0;
    qr.resize(size_t(Hq * d));
    // The position's rotation, once for all its Hq + Hk heads (and kept for the next layer's call).
    if (angles_pos != positions[t] || angles_dim != rotary_dim || angles_theta != theta) {
      cs.resize(size_t(rotary_dim / 2 + 1));
      sn.resize(size_t(rotary_dim / 2 + 1));
      rope_angles(cs.data(), sn.data(), positions[t], rotary_dim, freq);
      angles_pos = positions[t], angles_dim = rotary_dim, angles_theta = theta;
    }
    // (c) Qr[h] = ½(Q0[h] + K0[κ(h)]); Kr[j] = mean of Qr over the group of j.
    for (int64_t h = 0; h < Hq; h++) {
      const float* q0 = u + h * d;
      const float* k0 = u + A + (h / G) * d;
      for (int64_t i = 0; i < d; i++) qr[h * d + i] = 0.5f * (q0[i] + k0[i]);
    }
    for (int64_t h = 0; h < Hq; h++) {
      for (int64_t i = 0; i < d; i++) row[h * d + i] += qr[h * d + i];
    }
    for (int64_t j = 0; j < Hk; j++) {
      float* k = row + A + j * d;
      for (int64_t i = 0; i < d; i++) {
        float s = 0.f;
        for (int64_t g = 0; g < G; g++) s += qr[(j * G + g) * d + i];
        k[i] += s / float(G);
      }
    }
    // (d) QK norm (keys also scaled by the linear temperature), (e) RoPE at the absolute position.
    for (int64_t h = 0; h < Hq + Hk; h++) {
      float* v = row + h * d;
      float ss = 0.f;
      for (int64_t i = 0; i < d; i++) ss += v[i] * v[i];
      float n = std::sqrt(ss);
      float scale = sqrt_d / std::max(n, eps_q);
      if (h >= Hq) scale *= temp[h - Hq];
      for (int64_t i = 0; i < d; i++) v[i] *= scale;
      rope_rotate(v, cs.data(), sn.data(), rotary_dim);
    }
  });
}

void rope_apply_inverse(float* g, int64_t pos, int64_t r, const float* inv_freq) {
  const int64_t half = r / 2;
  for (int64_t i = 0; i < half; i++) {
    float phi = float(pos) * inv_freq[i];
    float c = std::cos(phi), s = std::sin(phi);
    float a = g[i], b = g[i + half];
    g[i] = a * c + b * s;
    g[i + half] = -a * s + b * c;
  }
}

void rope_rotate_inverse(float* g, const float* cos_in, const float* sin_in, int64_t r) {
  const int64_t half = r / 2;
  for (int64_t i = 0; i < half; i++) {
    const float c = cos_in[i], s = sin_in[i];
    const float a = g[i], b = g[i + half];
    g[i] = a * c + b * s;
    g[i + half] = -a * s + b * c;
  }
}

void cca_qk_backward(float* dmixed, float* draw, float* dtemp, const float* dqk, const float* conv,
                     const float* raw, const float* temp, const int64_t* positions, int64_t S,
                     const CcaDims& dm, int64_t rotary_dim, double theta) {
  ZAYA_PROFILE_SCOPE("cca_qk_backward");
  const int64_t Hq = dm.Hq, Hk = dm.Hk, d = dm.d, A = dm.A(), C = dm.C(), G = Hq / Hk;
  const float sqrt_d = std::sqrt(float(d));
  const float eps_q = 1.1920928955078125e-07f;  // the forward's clamp (spec §5.5d)
  std::vector<float> inv_freq(rotary_dim / 2 + 1), mixed(C), qr(Hq * d);
  std::vector<float> cs(rotary_dim / 2 + 1), sn(rotary_dim / 2 + 1);
  rope_inv_freq(inv_freq.data(), rotary_dim, theta);
  for (int64_t t = 0; t < S; t++) {
    const float* u = raw + t * C;
    // The position's angles once for its Hq + Hk heads (fp32 cos / sin per call were ~60% of this kernel).
    rope_angles(cs.data(), sn.data(), positions[t], rotary_dim, inv_freq.data());
    // Recompute the mixed, pre-norm Q̃ | K̃ of this token exactly as the forward does.
    for (int64_t h = 0; h < Hq; h++) {
      for (int64_t i = 0; i < d; i++) qr[h * d + i] = 0.5f * (u[h * d + i] + u[A + (h / G) * d + i]);
    }
    for (int64_t i = 0; i < A; i++) mixed[i] = conv[t * C + i] + qr[i];
    for (int64_t j = 0; j < Hk; j++) {
      for (int64_t i = 0; i < d; i++) {
        float s = 0.f;
        for (int64_t g = 0; g < G; g++) s += qr[(j * G + g) * d + i];
        mixed[A + j * d + i] = conv[t * C + A + j * d + i] + s / float(G);
      }
    }
    // Per head: undo RoPE on the gradient, then the norm (spec §6.7).
    float* dm_row = dmixed + t * C;
    for (int64_t h = 0; h < Hq + Hk; h++) {
      const float* v = mixed.data() + h * d;
      float* g = dm_row + h * d;
      for (int64_t i = 0; i < d; i++) g[i] = dqk[t * C + h * d + i];
      rope_rotate_inverse(g, cs.data(), sn.data(), rotary_dim);
      double ss = 0;
      for (int64_t i = 0; i < d; i++) ss += double(v[i]) * v[i];
      const float n = float(std::sqrt(ss));
      const float denom = std::max(n, eps_q);
      const float tau = h >= Hq ? temp[h - Hq] : 1.0f;
      if (h >= Hq) {  // ḡτ = Σ ḡK̂ · √d·K̃/max(n, ε)
        double s = 0;
        for (int64_t i = 0; i < d; i++) s += double(g[i]) * v[i];
        dtemp[h - Hq] += float(s * sqrt_d / denom);
      }
      const float scale = tau * sqrt_d / denom;
      if (n > eps_q) {  // ḡv = (τ√d/n)·(ḡ − v̂(v̂·ḡ))
        double dot = 0;
        for (int64_t i = 0; i < d; i++) dot += double(v[i]) * g[i];
        const float proj = float(dot / (double(n) * n));
        for (int64_t i = 0; i < d; i++) g[i] = scale * (g[i] - v[i] * proj);
      } else {  // clamped: the denominator is a constant
        for (int64_t i = 0; i < d; i++) g[i] *= scale;
      }
    }
    // Mixing (spec §6.8): ḡQr[h] = ḡQ̃[h] + ḡK̃[κ(h)]/G; ḡQ0[h] += ½ḡQr[h]; ḡK0[κ(h)] += ½ḡQr[h].
    float* dr = draw + t * C;
    for (int64_t h = 0; h < Hq; h++) {
      const int64_t j = h / G;
      for (int64_t i = 0; i < d; i++) {
        const float gqr = dm_row[h * d + i] + dm_row[A + j * d + i] / float(G);
        dr[h * d + i] += 0.5f * gqr;
        dr[A + j * d + i] += 0.5f * gqr;
      }
    }
  }
}

void cca_conv_backward(float* dframes, float* dw0, float* db0, float* dw1, float* db1, const float* dout,
                       const float* mid, const float* frames, const float* w0, const float* w1, int64_t S,
                       const CcaDims& dm) {
  ZAYA_PROFILE_SCOPE("cca_conv_backward");
  const int64_t C = dm.C(), d = dm.d, t0 = dm.t0, t1 = dm.t1, P = dm.P();
  const int64_t n_mid = S + t1 - 1;
  std::vector<float> dmid(n_mid * C, 0.f);
  // Grouped conv, per group g and tap j two GEMMs (the forward's product, with the same tap-major weights
  // w1t[j][o][c'] = W1[o,c',j]):
  //   ḡmid[j : j+S, g·d : (g+1)·d] += ḡc[:, g·d : (g+1)·d] · w1t[j][g·d : (g+1)·d]
  //   ḡw1t[j][g·d : (g+1)·d]       += ḡc[:, g·d : (g+1)·d]ᵀ · mid[j : j+S, g·d : (g+1)·d]
  // Parallel over groups: a group touches only its own ḡmid columns and its own weight rows.
  const int64_t groups = dm.Hq + dm.Hk;
  std::vector<float> w1t(t1 * C * d), dw1t(t1 * C * d, 0.f);
  for (int64_t o = 0; o < C; o++)
    for (int64_t c = 0; c < d; c++)
      for (int64_t j = 0; j < t1; j++) w1t[(j * C + o) * d + c] = w1[(o * d + c) * t1 + j];
#pragma omp parallel for schedule(dynamic, 1) if (S * C * d > 65536)
  for (int64_t g = 0; g < groups; g++) {
    for (int64_t j = 0; j < t1; j++) {
      const int64_t wrow = (j * C + g * d) * d;
      gemm(S, d, d, 1.f, mat(dout + g * d, C), mat(w1t.data() + wrow, d), 1.f, dmid.data() + j * C + g * d,
           C);
      gemm(d, d, S, 1.f, mat(dout + g * d, C, /*trans=*/true), mat(mid + j * C + g * d, C), 1.f,
           dw1t.data() + wrow, d);
    }
  }
  for (int64_t o = 0; o < C; o++)
    for (int64_t c = 0; c < d; c++)
      for (int64_t j = 0; j < t1; j++) dw1[(o * d + c) * t1 + j] += dw1t[(j * C + o) * d + c];
  for (int64_t t = 0; t < S; t++)
    for (int64_t o = 0; o < C; o++) db1[o] += dout[t * C + o];

  // Depthwise conv: mid row s reads frame rows s + j (j < t0). Every mid row, including the leading σ < 0
  // ones (b0 over zero or cached frames), depends on b0. Tap-major weights so the channel loops are unit
  // stride.
  std::vector<float> w0t(t0 * C), dw0t(t0 * C, 0.f);
  for (int64_t c = 0; c < C; c++)
    for (int64_t j = 0; j < t0; j++) w0t[j * C + c] = w0[c * t0 + j];
  for (int64_t i = 0; i < (P + S) * C; i++) dframes[i] = 0.f;
  for (int64_t s = 0; s < n_mid; s++) {
    const float* g = dmid.data() + s * C;
    for (int64_t c = 0; c < C; c++) db0[c] += g[c];
    for (int64_t j = 0; j < t0; j++) {
      const float* u = frames + (s + j) * C;
      const float* w = w0t.data() + j * C;
      float* dw = dw0t.data() + j * C;
      float* du = dframes + (s + j) * C;
      for (int64_t c = 0; c < C; c++) {
        dw[c] += g[c] * u[c];
        du[c] += g[c] * w[c];
      }
    }
  }
  for (int64_t c = 0; c < C; c++)
    for (int64_t j = 0; j < t0; j++) dw0[c * t0 + j] += dw0t[j * C + c];
}

}  // namespace zaya
