#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/profile.h"
#include "kernels/gemm.h"

namespace zaya {

namespace {

// Visible key range [first, last] of a query at absolute position qp (causal, optional window).
inline void visible_range(int64_t qp, const AttentionArgs& a, int64_t* first, int64_t* last) {
  *last = std::min(qp - a.key_pos0, a.n_keys - 1);
  *first = a.window > 0 ? std::max<int64_t>(0, qp - a.window + 1 - a.key_pos0) : 0;
}

// Masked softmax in place over one score row p[0, n) restricted to [first, last]; entries outside and
// padded keys become 0. Returns the log-sum-exp (-inf when nothing is visible; the row is then all 0).
float masked_softmax_row(float* p, int64_t n, int64_t first, int64_t last, const uint8_t* key_valid) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = first; j <= last; j++) {
    if (key_valid && !key_valid[j]) continue;
    mx = p[j] > mx ? p[j] : mx;
  }
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(p, p + n, 0.f);
    return mx;
  }
  float sum = 0.f;
  for (int64_t j = 0; j < n; j++) {
    bool vis = j >= first && j <= last && (!key_valid || key_valid[j]);
    float e = vis ? std::exp(p[j] - mx) : 0.f;
    p[j] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; j++) p[j] *= inv;
  return mx + std::log(sum);
}

}  // namespace

namespace {

// Few queries (decode, short chunks): dot products per query, no GEMM (whose primitives are per shape and
// the key count changes every step).
void attention_rows(float* out, float* lse, const float* q, int64_t q_stride, const float* k, const float* v,
                    const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  const int64_t G = a.Hq / a.Hk, d = a.d, n = a.n_keys;
  const float scale = 1.0f / std::sqrt(float(d));
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (a.S * a.Hq * n > 8192)
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
      for (int64_t j = first; j <= last; j++) {
        const float* kv = kh + j * d;
        float s = 0.f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < d; i++) s += qv[i] * kv[i];
        p[j] = s * scale;
      }
      float l = masked_softmax_row(p.data(), n, first, last, key_valid);
      if (lse) lse[t * a.Hq + h] = l;
      for (int64_t i = 0; i < d; i++) o[i] = 0.f;
      for (int64_t j = first; j <= last; j++) {
        if (p[j] == 0.f) continue;
        const float* vv = vh + j * d;
#pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] += p[j] * vv[i];
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                       const float* v, const int64_t* q_pos, const uint8_t* key_valid,
                       const AttentionArgs& a) {
  ZAYA_PROFILE_SCOPE("attention");
  if (a.S < 32) return attention_rows(out, lse, q, q_stride, k, v, q_pos, key_valid, a);
  const int64_t G = a.Hq / a.Hk, d = a.d, S = a.S, n = a.n_keys;
  const float scale = 1.0f / std::sqrt(float(d));
  // Per query head and block of kQB queries: scores[rows, keys] = Q · Kᵀ / √d (a GEMM) over the keys up to
  // the block's last visible one (causality skips the rest), masked softmax per row, O = P · V. (head, block)
  // items run in parallel with single-threaded GEMMs (gemm() stays on the calling thread inside a parallel
  // region).
  constexpr int64_t kQB = 128;
  const int64_t n_blocks = (S + kQB - 1) / kQB;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
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
      gemm(rows, nk, d, scale, mat(q + t0 * q_stride + h * d, q_stride), mat(kh, d, /*trans=*/true), 0.f,
           scores.data(), nk);
      for (int64_t t = 0; t < rows; t++) {
        int64_t first, last;
        visible_range(q_pos[t0 + t], a, &first, &last);
        float l = masked_softmax_row(scores.data() + t * nk, nk, first - key_lo, last - key_lo,
                                     key_valid ? key_valid + key_lo : nullptr);
        if (lse) lse[(t0 + t) * a.Hq + h] = l;
      }
      gemm(rows, d, nk, 1.f, mat(scores.data(), nk), mat(vh, d), 0.f, o, a.Hq * d);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t q_stride,
                        const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* lse,
                        const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  ZAYA_PROFILE_SCOPE("attention_backward");
  const int64_t G = a.Hq / a.Hk, d = a.d;
  const float scale = 1.0f / std::sqrt(float(d));
  // Parallel over KV heads: the dk/dv rows of head j are touched only by its G query heads, dq rows by
  // their own head, so threads never share an output.
#pragma omp parallel for schedule(static) if (a.Hk > 1 && a.S * a.n_keys * a.Hq * d > 65536)
  for (int64_t j = 0; j < a.Hk; j++) {
    std::vector<float> p(a.n_keys), dp(a.n_keys);
    for (int64_t t = 0; t < a.S; t++) {
      int64_t first, last;
      visible_range(q_pos[t], a, &first, &last);
      for (int64_t h = j * G; h < (j + 1) * G; h++) {
        const float l = lse[t * a.Hq + h];
        if (!std::isfinite(l)) continue;
        const float* qv = q + t * q_stride + h * d;
        const float* go = dout + t * a.Hq * d + h * d;
        float* dqv = dq + t * q_stride + h * d;
        // π_i = exp(s_i − lse), ḡπ_i = ḡO·V_i, then ḡs_i = π_i(ḡπ_i − Σ_k π_k ḡπ_k).
        double row_dot = 0;
        for (int64_t i = first; i <= last; i++) {
          p[i] = 0.f;
          dp[i] = 0.f;
          if (key_valid && !key_valid[i]) continue;
          const float* kv = k + i * k_stride + j * d;
          const float* vv = v + i * v_stride + j * d;
          float s = 0.f, g = 0.f;
          for (int64_t c = 0; c < d; c++) {
            s += qv[c] * kv[c];
            g += go[c] * vv[c];
          }
          p[i] = std::exp(s * scale - l);
          dp[i] = g;
          row_dot += double(p[i]) * g;
        }
        for (int64_t i = first; i <= last; i++) {
          if (p[i] == 0.f) continue;
          const float ds = p[i] * (dp[i] - float(row_dot)) * scale;
          const float* kv = k + i * k_stride + j * d;
          float* dkv = dk + i * k_stride + j * d;
          float* dvv = dv + i * v_stride + j * d;
          for (int64_t c = 0; c < d; c++) {
            dqv[c] += ds * kv[c];
            dkv[c] += ds * qv[c];
            dvv[c] += p[i] * go[c];
          }
        }
      }
    }
  }
}

}  // namespace zaya
