#include "train/muon.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/gemm.h"

namespace zaya::train {

namespace {
// out[c, r] = in[r, c] for an in [rows, cols] matrix.
void transpose(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[c * rows + r] = in[r * cols + c];
}
}  // namespace

void newton_schulz(float* X, int64_t rows, int64_t cols, const MuonConfig& cfg, std::vector<float>& scratch) {
  const int64_t n = rows * cols;
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows;  // short side: A and B are [m, m]
  const int64_t k = tall ? rows : cols;  // long side: the working matrix is [m, k]
  scratch.resize(size_t(2 * n + 2 * m * m));
  float* work = scratch.data();  // [m, k] current iterate
  float* next = work + n;        // [m, k] next iterate
  float* gram = next + n;        // [m, m] A = X·Xᵀ
  float* poly = gram + m * m;    // [m, m] B = b·A + c·A·A

  double sum_sq = 0;
  for (int64_t i = 0; i < n; i++) sum_sq += double(X[i]) * X[i];
  const float inv_norm = float(1.0 / (std::sqrt(sum_sq) + 1e-7));
  if (tall) {
    transpose(X, work, rows, cols);
  } else {
    std::copy(X, X + n, work);
  }
  for (int64_t i = 0; i < n; i++) work[i] *= inv_norm;

  const float a = cfg.ns_coefficients[0], b = cfg.ns_coefficients[1], c = cfg.ns_coefficients[2];
  for (int it = 0; it < cfg.ns_steps; it++) {
    gemm(m, m, k, 1.0f, mat(work, k), mat(work, k, /*trans=*/true), 0.0f, gram, m);
    gemm(m, m, m, c, mat(gram, m), mat(gram, m), 0.0f, poly, m);
    for (int64_t i = 0; i < m * m; i++) poly[i] += b * gram[i];
    for (int64_t i = 0; i < n; i++) next[i] = a * work[i];
    gemm(m, k, m, 1.0f, mat(poly, m), mat(work, k), 1.0f, next, k);
    std::swap(work, next);
  }
  if (tall) {
    transpose(work, X, cols, rows);
  } else {
    std::copy(work, work + n, X);
  }
}

float muon_update_scale(int64_t rows, int64_t cols, const MuonConfig& cfg) {
  switch (cfg.rms_match) {
    case RmsMatch::None:
      return 1.0f;
    case RmsMatch::Moonlight:
      return cfg.rms_match_scale * float(std::sqrt(double(std::max(rows, cols))));
    case RmsMatch::KellerJordan:
      return float(std::sqrt(std::max(1.0, double(rows) / double(cols))));
  }
  return 1.0f;
}

void muon_update(float* value, const float* grad, float* momentum, int64_t batch, int64_t rows, int64_t cols,
                 float lr, float weight_decay, const MuonConfig& cfg, std::vector<float>& scratch) {
  const int64_t n = rows * cols;
  const float mu = cfg.momentum;
  const float decay = 1.0f - lr * weight_decay;
  const float step = lr * muon_update_scale(rows, cols, cfg);
  std::vector<float> update(static_cast<size_t>(n));
  for (int64_t e = 0; e < batch; e++) {
    const float* g = grad + e * n;
    float* w = value + e * n;
    if (mu == 0.0f) {
      std::copy(g, g + n, update.data());
    } else {
      float* buf = momentum + e * n;
      for (int64_t i = 0; i < n; i++) {
        buf[i] = mu * buf[i] + g[i];
        update[i] = cfg.nesterov ? g[i] + mu * buf[i] : buf[i];
      }
    }
    newton_schulz(update.data(), rows, cols, cfg, scratch);
    for (int64_t i = 0; i < n; i++) w[i] = w[i] * decay - step * update[i];
  }
}

}  // namespace zaya::train
