#include "kernels/attention.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/profile.h"
#include "kernels/gemm.h"
#include "kernels/gemm_small.h"
#include "kernels/vec_math.h"

namespace zaya {

namespace {

// Visible key range [first, last] of a query at absolute position qp (causal, optional window).
inline void visible_range(int64_t qp, const AttentionArgs& a, int64_t* first, int64_t* last) {
  *last = std::min(qp - a.key_pos0, a.n_keys - 1);
  *first = a.window > 0 ? std::max<int64_t>(0, qp - a.window + 1 - a.key_pos0) : 0;
}

// Masked softmax in place over one score row p[0, n) restricted to [first, last]; entries outside and
// padded keys become 0. Returns the log-sum-exp (-inf when nothing is visible; the row is then all 0).
// Vectorised (vec_math.h: exp within 2 ulp, the sum in double): the scalar std::exp loop this replaced was
// most of a mid.json forward's attention time (~40M exps a step). A row's values depend only on its own
// visible scores: the lanes run over [first, last] from `first`, whatever n or the block around it.
float masked_softmax_row(float* p, int64_t n, int64_t first, int64_t last, const uint8_t* key_valid) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  first = std::max<int64_t>(first, 0);
  last = std::min<int64_t>(last, n - 1);
  if (last < first) {
    std::fill(p, p + n, 0.f);
    return kNegInf;
  }
  std::fill(p, p + first, 0.f);
  std::fill(p + last + 1, p + n, 0.f);
  if (key_valid)
    for (int64_t j = first; j <= last; j++)
      if (!key_valid[j]) p[j] = kNegInf;  // exp(-inf - max) is an exact 0
  const int64_t cnt = last - first + 1;
  const float mx = row_max(p + first, cnt);
  if (mx == kNegInf) {
    std::fill(p + first, p + last + 1, 0.f);
    return mx;
  }
  const double sum = exp_shift_sum(p + first, p + first, cnt, mx);
  scale_row(p + first, cnt, float(1.0 / sum));
  return mx + float(std::log(sum));
}

}  // namespace

namespace {

// Few queries (decode, short chunks): dot products per query, no GEMM (whose primitives are per shape and
// the key count changes every step).
// o[0, d) = Σ_{j in [first, last], p[j] != 0} p[j] · v[j·d, (j+1)·d), summed over j in order for each
// element (the same fma chain whatever the vector width: every path gives the same bits); 128 elements at a
// time kept in registers across the keys (a store per key and vector cost 30% before).
inline void weighted_rows_f32(float* o, const float* p, const float* v, int64_t first, int64_t last,
                              int64_t d) {
  int64_t i0 = 0;
#if defined(__AVX512F__)
  for (; i0 + 128 <= d; i0 += 128) {
    __m512 acc[8];
    for (int u = 0; u < 8; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t j = first; j <= last; j++) {
      if (p[j] == 0.f) continue;
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* vv = v + j * d + i0;
      for (int u = 0; u < 8; u++) acc[u] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vv + 16 * u), acc[u]);
    }
    for (int u = 0; u < 8; u++) _mm512_storeu_ps(o + i0 + 16 * u, acc[u]);
  }
  for (; i0 + 16 <= d; i0 += 16) {  // head_dim 64 (mid.json): four of these
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = first; j <= last; j++)
      if (p[j] != 0.f) acc = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_loadu_ps(v + j * d + i0), acc);
    _mm512_storeu_ps(o + i0, acc);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  // The same per-element chains on 8-float vectors (CPUs without AVX-512), 64 elements a pass.
  for (; i0 + 64 <= d; i0 += 64) {
    __m256 acc[8];
    for (int u = 0; u < 8; u++) acc[u] = _mm256_setzero_ps();
    for (int64_t j = first; j <= last; j++) {
      if (p[j] == 0.f) continue;
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* vv = v + j * d + i0;
      for (int u = 0; u < 8; u++) acc[u] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vv + 8 * u), acc[u]);
    }
    for (int u = 0; u < 8; u++) _mm256_storeu_ps(o + i0 + 8 * u, acc[u]);
  }
  for (; i0 + 8 <= d; i0 += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = first; j <= last; j++)
      if (p[j] != 0.f) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * d + i0), acc);
    _mm256_storeu_ps(o + i0, acc);
  }
#endif
  for (int64_t i = i0; i < d; i++) {
    float acc = 0.f;
    for (int64_t j = first; j <= last; j++)
      if (p[j] != 0.f) acc = std::fma(p[j], v[j * d + i], acc);
    o[i] = acc;
  }
}

void attention_rows(float* out, float* lse, const float* q, int64_t q_stride, const float* k, const float* v,
                    const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  const int64_t G = a.Hq / a.Hk, d = a.d, n = a.n_keys;
  const float scale = 1.0f / std::sqrt(float(d));
  // Threaded from about 2k query-key pairs: a decode token at 512 keys (8 heads) spends ~0.3 ms a layer
  // alone, far more than waking the pool costs.
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (a.S * a.Hq * n > 2048)
  for (int64_t t = 0; t < a.S; t++) {
    for (int64_t h = 0; h < a.Hq; h++) {
      thread_local std::vector<float> p;
      p.resize(n);
      const float* qv = q + t * q_stride + h * d;
      const float* kh = k + (h / G) * a.key_stride;
      const float* vh = v + (h / G) * a.key_stride;
      float* o = out + t * a.Hq * d + h * d;
      int64_t first, last;
      visible_range(q_pos[t], a, &first, &last);
      for (int64_t j = first; j <= last; j++) p[j] = dot_f32(qv, kh + j * d, d) * scale;
      float l = masked_softmax_row(p.data(), n, first, last, key_valid);
      if (lse) lse[t * a.Hq + h] = l;
      weighted_rows_f32(o, p.data(), vh, first, last, d);
    }
  }
}

}  // namespace

namespace {

// Per query head and block of kQB queries: scores[rows, keys] = Q · Kᵀ / √d (a GEMM) over the keys up to the
// block's last visible one (causality skips the rest), masked softmax per row, O = P · V. (head, block) items
// run in parallel (when `parallel`) with single-threaded GEMMs (gemm() stays on the calling thread inside a
// parallel region). `bf16`: K and V rounded to bf16 once per call (gemm() rounds Q and P). `invariant`: fp32
// products on zaya's small kernel called directly, bitwise what gemm()'s row-invariant backend computes for
// fp32 (gemm_rows.h runs it per tile) without its per-call dispatch (~2.5 us a call: 16 calls per decode
// token and layer).
void attention_blocks(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                      const float* v, const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a,
                      bool bf16, bool parallel, bool invariant) {
  const int64_t G = a.Hq / a.Hk, d = a.d, S = a.S, n = a.n_keys;
  const float scale = 1.0f / std::sqrt(float(d));
  constexpr int64_t kQB = 128;
  const int64_t n_blocks = (S + kQB - 1) / kQB;
  std::vector<uint16_t> k16, v16;
  if (bf16) {
    k16.resize(a.Hk * n * d);
    v16.resize(a.Hk * n * d);
    for (int64_t j = 0; j < a.Hk; j++) {
      convert_f32_to_bf16(k16.data() + j * n * d, k + j * a.key_stride, n * d);
      convert_f32_to_bf16(v16.data() + j * n * d, v + j * a.key_stride, n * d);
    }
  }
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (parallel)
  for (int64_t h = 0; h < a.Hq; h++) {
    for (int64_t qb = 0; qb < n_blocks; qb++) {
      const int64_t t0 = qb * kQB, rows = std::min(kQB, S - t0);
      int64_t key_lo = n, key_hi = 0;  // union of the visible ranges of the block's queries
      for (int64_t t = t0; t < t0 + rows; t++) {
        int64_t first, last;
        visible_range(q_pos[t], a, &first, &last);
        key_lo = std::min(key_lo, first);
        key_hi = std::max(key_hi, last + 1);
      }
      float* o = out + t0 * a.Hq * d + h * d;
      if (key_hi <= key_lo) {
        for (int64_t t = 0; t < rows; t++) std::fill(o + t * a.Hq * d, o + t * a.Hq * d + d, 0.f);
        continue;
      }
      const int64_t nk = key_hi - key_lo;
      thread_local std::vector<float> scores;
      scores.resize(rows * nk);
      const float* kh = k + (h / G) * a.key_stride + key_lo * d;
      const float* vh = v + (h / G) * a.key_stride + key_lo * d;
      MatRef kref = mat(kh, d, /*trans=*/true), vref = mat(vh, d);
      if (bf16) {
        kref = {k16.data() + ((h / G) * n + key_lo) * d, DType::BF16, d, true};
        vref = {v16.data() + ((h / G) * n + key_lo) * d, DType::BF16, d, false};
      }
      if (invariant)
        gemm_small_f32(rows, nk, d, scale, mat(q + t0 * q_stride + h * d, q_stride), kref, 0.f, scores.data(),
                       nk);
      else
        gemm(rows, nk, d, scale, mat(q + t0 * q_stride + h * d, q_stride), kref, 0.f, scores.data(), nk);
      for (int64_t t = 0; t < rows; t++) {
        int64_t first, last;
        visible_range(q_pos[t0 + t], a, &first, &last);
        float l = masked_softmax_row(scores.data() + t * nk, nk, first - key_lo, last - key_lo,
                                     key_valid ? key_valid + key_lo : nullptr);
        if (lse) lse[(t0 + t) * a.Hq + h] = l;
      }
      if (invariant)
        gemm_small_f32(rows, d, nk, 1.f, mat(scores.data(), nk), vref, 0.f, o, a.Hq * d);
      else
        gemm(rows, d, nk, 1.f, mat(scores.data(), nk), vref, 0.f, o, a.Hq * d);
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                       const float* v, const int64_t* q_pos, const uint8_t* key_valid,
                       const AttentionArgs& a) {
  ZAYA_PROFILE_SCOPE("attention");
  // Batch-invariant mode (gemm.h): every call, decode included, takes the blocked path in fp32, whose GEMMs
  // then run on the row-invariant kernel. A query's output is then the same however many queries share the
  // call (the scheduler's prefill chunks) or the block: its score row is a dot product over d in a fixed
  // order, its softmax runs over its visible keys in order (the block's other keys are exact zeros, added
  // after or before them), and P·V is one fused multiply-add chain over the keys in order (B stored [K, N]:
  // gemm_rows.h), to which the zeros of keys it cannot see add nothing. (The per-row loop below would be
  // invariant too, but is ~5x slower for long prefills.)
  if (gemm_batch_invariant())
    return attention_blocks(out, lse, q, q_stride, k, v, q_pos, key_valid, a, /*bf16=*/false,
                            /*parallel=*/a.S * a.Hq * a.n_keys > 8192, /*invariant=*/true);
  // Few queries (decode, speculative chunks): per-row dot products. From 8 queries the blocked path's GEMMs
  // win: 20-query chunks against a 100-key cache ran 2.8x faster there (zaya bench eval --way shared).
  if (a.S < 8) return attention_rows(out, lse, q, q_stride, k, v, q_pos, key_valid, a);
  attention_blocks(out, lse, q, q_stride, k, v, q_pos, key_valid, a, a.gemm_dtype == DType::BF16,
                   /*parallel=*/true, /*invariant=*/false);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t q_stride,
                        const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* lse,
                        const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  ZAYA_PROFILE_SCOPE("attention_backward");
  const int64_t G = a.Hq / a.Hk, d = a.d, S = a.S, od = a.Hq * d;
  const float scale = 1.0f / std::sqrt(float(d));
  constexpr int64_t kQB = 128;
  const int64_t n_blocks = (S + kQB - 1) / kQB;
  // Per query head h and block of queries, over the keys the block can see, with single-threaded GEMMs:
  //   scores = Q·Kᵀ/√d,  π = exp(scores − lse) (0 where masked),  ḡπ = ḡO·Vᵀ,
  //   ḡs = π ⊙ (ḡπ − rowsum(π ⊙ ḡπ)),  ḡQ += ḡs·K/√d,  ḡK += ḡsᵀ·Q/√d,  ḡV += πᵀ·ḡO.
  // Parallel over KV heads: the dk/dv columns of head j are written only by its G query heads and dq columns
  // only by their own head, so threads never share an output.
#pragma omp parallel for schedule(static) if (a.Hk > 1 && S * a.n_keys * a.Hq * d > 65536)
  for (int64_t j = 0; j < a.Hk; j++) {
    std::vector<float> pi, dpi;
    for (int64_t h = j * G; h < (j + 1) * G; h++) {
      for (int64_t qb = 0; qb < n_blocks; qb++) {
        const int64_t t0 = qb * kQB, rows = std::min(kQB, S - t0);
        int64_t key_lo = a.n_keys, key_hi = 0;
        for (int64_t t = t0; t < t0 + rows; t++) {
          int64_t first, last;
          visible_range(q_pos[t], a, &first, &last);
          key_lo = std::min(key_lo, first);
          key_hi = std::max(key_hi, last + 1);
        }
        if (key_hi <= key_lo) continue;
        const int64_t nk = key_hi - key_lo;
        pi.resize(rows * nk);
        dpi.resize(rows * nk);
        const float* qb_ptr = q + t0 * q_stride + h * d;
        const float* go = dout + t0 * od + h * d;
        const float* kr = k + key_lo * k_stride + j * d;
        const float* vr = v + key_lo * v_stride + j * d;
        gemm(rows, nk, d, scale, mat(qb_ptr, q_stride), mat(kr, k_stride, /*trans=*/true), 0.f, pi.data(),
             nk);
        gemm(rows, nk, d, 1.f, mat(go, od), mat(vr, v_stride, /*trans=*/true), 0.f, dpi.data(), nk);
        for (int64_t r = 0; r < rows; r++) {
          const int64_t t = t0 + r;
          float* p = pi.data() + r * nk;
          float* g = dpi.data() + r * nk;
          const float l = lse[t * a.Hq + h];
          int64_t first, last;
          visible_range(q_pos[t], a, &first, &last);
          // π over the visible keys [lo, hi] of this block's range (vectorised exp, vec_math.h), 0 elsewhere.
          const int64_t lo = std::max<int64_t>(first - key_lo, 0),
                        hi = std::min<int64_t>(last - key_lo, nk - 1);
          if (!std::isfinite(l) || hi < lo) {
            std::fill(p, p + nk, 0.f);
            std::fill(g, g + nk, 0.f);
            continue;
          }
          std::fill(p, p + lo, 0.f);
          std::fill(p + hi + 1, p + nk, 0.f);
          if (key_valid)
            for (int64_t i = lo; i <= hi; i++)
              if (!key_valid[key_lo + i]) p[i] = -std::numeric_limits<float>::infinity();  // exp gives 0
          exp_shift_sum(p + lo, p + lo, hi - lo + 1, l);
          const float row_dot = dot_f32(p, g, nk);
          for (int64_t i = 0; i < nk; i++) g[i] = p[i] * (g[i] - row_dot) * scale;  // ḡs/√d
        }
        gemm(rows, d, nk, 1.f, mat(dpi.data(), nk), mat(kr, k_stride), 1.f, dq + t0 * q_stride + h * d,
             q_stride);
        gemm(nk, d, rows, 1.f, mat(dpi.data(), nk, /*trans=*/true), mat(qb_ptr, q_stride), 1.f,
             dk + key_lo * k_stride + j * d, k_stride);
        gemm(nk, d, rows, 1.f, mat(pi.data(), nk, /*trans=*/true), mat(go, od), 1.f,
             dv + key_lo * v_stride + j * d, v_stride);
      }
    }
  }
}

}  // namespace zaya
