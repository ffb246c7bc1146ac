#include "train/muon.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/threads.h"
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

namespace {
// One matrix of muon_update: momentum, Newton–Schulz into `update` (n floats), decayed step of w.
void muon_matrix(float* w, const float* g, float* buf, int64_t rows, int64_t cols, float decay, float step,
                 const MuonConfig& cfg, float* update, std::vector<float>& scratch) {
  const int64_t n = rows * cols;
  const float mu = cfg.momentum;
  if (mu == 0.0f) {
    std::copy(g, g + n, update);
  } else {
    for (int64_t i = 0; i < n; i++) {
      buf[i] = mu * buf[i] + g[i];
      update[i] = cfg.nesterov ? g[i] + mu * buf[i] : buf[i];
    }
  }
  newton_schulz(update, rows, cols, cfg, scratch);
  for (int64_t i = 0; i < n; i++) w[i] = w[i] * decay - step * update[i];
}

// Below this many elements per matrix one thread per matrix beats all threads on each matrix's small GEMMs.
constexpr int64_t kPerThreadMatrixElements = 256 * 256;
}  // namespace

void muon_update(float* value, const float* grad, float* momentum, int64_t batch, int64_t rows, int64_t cols,
                 float lr, float weight_decay, const MuonConfig& cfg, std::vector<float>& scratch) {
  const int64_t n = rows * cols;
  const float decay = 1.0f - lr * weight_decay;
  const float step = lr * muon_update_scale(rows, cols, cfg);
  auto buf_of = [&](int64_t e) { return cfg.momentum == 0.0f ? nullptr : momentum + e * n; };
  if (batch > 1 && n <= kPerThreadMatrixElements && threads_here() > 1) {
    // Small expert matrices: each thread orthogonalises whole matrices (gemm() then runs on its thread).
#pragma omp parallel
    {
      std::vector<float> update(static_cast<size_t>(n)), local_scratch;
#pragma omp for schedule(dynamic, 1)
      for (int64_t e = 0; e < batch; e++)
        muon_matrix(value + e * n, grad + e * n, buf_of(e), rows, cols, decay, step, cfg, update.data(),
                    local_scratch);
    }
    return;
  }
  std::vector<float> update(static_cast<size_t>(n));
  for (int64_t e = 0; e < batch; e++)
    muon_matrix(value + e * n, grad + e * n, buf_of(e), rows, cols, decay, step, cfg, update.data(), scratch);
}

}  // namespace zaya::train
