#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace zaya {

void attention_forward(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                       const float* v, const int64_t* q_pos, const uint8_t* key_valid,
                       const AttentionArgs& a) {
  const int64_t G = a.Hq / a.Hk, d = a.d;
  const float scale = 1.0f / std::sqrt(float(d));
#pragma omp parallel for collapse(2) schedule(dynamic, 4) if (a.S * a.n_keys * a.Hq > 32768)
  for (int64_t t = 0; t < a.S; t++) {
    for (int64_t h = 0; h < a.Hq; h++) {
      const float* qv = q + t * q_stride + h * d;
      const float* kh = k + (h / G) * a.key_stride;
      const float* vh = v + (h / G) * a.key_stride;
      float* o = out + t * a.Hq * d + h * d;
      // Visible keys: absolute position p with p <= q_pos (and q_pos - p < W), not padding.
      int64_t last = q_pos[t] - a.key_pos0;  // index of the query's own position
      if (last >= a.n_keys) last = a.n_keys - 1;
      int64_t first = 0;
      if (a.window > 0) first = std::max<int64_t>(0, q_pos[t] - a.window + 1 - a.key_pos0);
      thread_local std::vector<float> p;
      p.assign(std::max<int64_t>(last - first + 1, 0), 0.f);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = first; j <= last; j++) {
        if (key_valid && !key_valid[j]) continue;
        const float* kv = kh + j * d;
        float s = 0.f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < d; i++) s += qv[i] * kv[i];
        s *= scale;
        p[j - first] = s;
        mx = s > mx ? s : mx;
      }
      for (int64_t i = 0; i < d; i++) o[i] = 0.f;
      if (mx == -std::numeric_limits<float>::infinity()) {  // padding query: nothing visible
        if (lse) lse[t * a.Hq + h] = -std::numeric_limits<float>::infinity();
        continue;
      }
      float sum = 0.f;
      for (int64_t j = first; j <= last; j++) {
        if (key_valid && !key_valid[j]) {
          p[j - first] = 0.f;
          continue;
        }
        float e = std::exp(p[j - first] - mx);
        p[j - first] = e;
        sum += e;
      }
      float inv = 1.0f / sum;
      for (int64_t j = first; j <= last; j++) {
        float w = p[j - first] * inv;
        if (w == 0.f) continue;
        const float* vv = vh + j * d;
#pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] += w * vv[i];
      }
      if (lse) lse[t * a.Hq + h] = mx + std::log(sum);
    }
  }
}

}  // namespace zaya
