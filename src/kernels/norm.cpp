#include "kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/profile.h"
#include "core/threads.h"

namespace zaya {

void rmsnorm_forward(float* out, float* rstd, const float* in, const float* g, int64_t N, int64_t D,
                     float eps) {
  ZAYA_PROFILE_SCOPE("rmsnorm");
  parallel_for_static(N, N * D > 16384, [&](int64_t n) {
    const float* x = in + n * D;
    float* y = out + n * D;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < D; i++) ss += x[i] * x[i];
    float r = 1.0f / std::sqrt(ss / float(D) + eps);
    if (rstd) rstd[n] = r;
#pragma omp simd
    for (int64_t i = 0; i < D; i++) y[i] = g[i] * (x[i] * r);
  });
}

void rmsnorm_backward(float* din, float* dg, const float* dout, const float* in, const float* g,
                      const float* rstd, int64_t N, int64_t D, bool accumulate) {
  ZAYA_PROFILE_SCOPE("rmsnorm_backward");
  // ḡx = ν·(q − x̂·mean(q ⊙ x̂)) with q = ḡy ⊙ g, x̂ = x·ν;  ḡg = Σ ḡy ⊙ x̂. Rows in fixed blocks over the
  // threads (one thread did them all: 1.3 ms a mid.json call); each block sums its rows' ḡy ⊙ x̂ per column,
  // then the blocks are added in block order in fp64, so ḡg does not depend on the thread count.
  constexpr int64_t kRows = 32;
  const int64_t n_blocks = (N + kRows - 1) / kRows;
  std::vector<float> partial(size_t(n_blocks * D));  // [block][D]
#pragma omp parallel for schedule(static) if (N * D > 65536)
  for (int64_t blk = 0; blk < n_blocks; blk++) {
    float* pg = partial.data() + blk * D;
    std::fill(pg, pg + D, 0.f);
    for (int64_t n = blk * kRows; n < std::min(N, (blk + 1) * kRows); n++) {
      const float* x = in + n * D;
      const float* dy = dout + n * D;
      float* dx = din + n * D;
      const float r = rstd[n];
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < D; i++) dot += dy[i] * g[i] * x[i] * r;
      const float mean = dot / float(D);
#pragma omp simd
      for (int64_t i = 0; i < D; i++) {
        const float xh = x[i] * r;
        const float v = r * (dy[i] * g[i] - xh * mean);
        dx[i] = accumulate ? dx[i] + v : v;
        pg[i] += dy[i] * xh;
      }
    }
  }
  for (int64_t i = 0; i < D; i++) {
    double s = 0;
    for (int64_t blk = 0; blk < n_blocks; blk++) s += partial[size_t(blk * D + i)];
    dg[i] += float(s);
  }
}

}  // namespace zaya
