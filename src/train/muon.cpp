#include "train/muon.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/gemm.h"

namespace zaya::train {

namespace {
// Element-wise passes over the iterate, threaded when they are big enough to pay for it (the matrices of a
// real model: 1-2 M values). Each element's value is independent of the split.
constexpr int64_t kParallelElements = 1 << 16;

// fn(begin, end) over [0, n) in chunks of 16K, the chunks over the threads when n is large. The passes below
// are plain loops over restrict pointers, which the compiler vectorises: written as `omp parallel for simd`
// with an `if`, GCC 12 emitted scalar loops (perf: ~25% of a 256 x 256 Newton-Schulz on one thread).
constexpr int64_t kChunk = 1 << 14;
template <typename Fn>
void for_chunks(int64_t n, const Fn& fn) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t c = 0; c < n; c += kChunk) fn(c, std::min(n, c + kChunk));
}

// dst[i] = bf16(src[i]) (convert_f32_to_bf16: round to nearest even).
void round_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  for_chunks(n, [&](int64_t b, int64_t e) { convert_f32_to_bf16(dst + b, src + b, e - b); });
}

// dst[i] = a · src[i].
void scale_into(float* __restrict dst, const float* __restrict src, float a, int64_t n) {
  for_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) dst[i] = a * src[i];
  });
}

// dst[i] += b · src[i].
void add_scaled(float* __restrict dst, const float* __restrict src, float b, int64_t n) {
  for_chunks(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) dst[i] += b * src[i];
  });
}

// Σ x[i]² in fp64 in a fixed order whatever the thread count: 8 running sums per 16K chunk (lane i mod 8),
// the chunks' sums added in chunk order.
double sum_squares(const float* __restrict x, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(std::max<int64_t>(chunks, 1)), 0.0);
  for_chunks(n, [&](int64_t b, int64_t e) {
    double acc[8] = {};
    int64_t i = b;
    for (; i + 8 <= e; i += 8)
      for (int j = 0; j < 8; j++) acc[j] += double(x[i + j]) * double(x[i + j]);
    for (int j = 0; i < e; i++, j++) acc[j] += double(x[i]) * double(x[i]);
    part[size_t(b / kChunk)] =
        ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}
}  // namespace

void newton_schulz(float* X, int64_t rows, int64_t cols, const MuonConfig& cfg, std::vector<float>& scratch) {
  const int64_t n = rows * cols;
  // The iteration works on the short side: with X [rows, cols] and m = min(rows, cols),
  //   wide (rows <= cols): A = X·Xᵀ [m, m], X ← a·X + B·X;
  //   tall (rows > cols):  A = Xᵀ·X [m, m], X ← a·X + X·B   (the wide form on Xᵀ, transposed back: B is
  //   symmetric), so no transposed copy is ever made.
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows;  // short side: A and B are [m, m]
  const int64_t k = tall ? rows : cols;  // long side
  const bool bf16 = cfg.ns_dtype == DType::BF16;
  // fp32: next [rows, cols], gram, poly [m, m]; then, for bf16 operands, xb [rows, cols], gb, pb [m, m] as
  // uint16 in the floats after them (half a float each, rounded up, plus 64 bytes).
  const int64_t f32_floats = n + 2 * m * m, bf16_floats = bf16 ? (n + 2 * m * m + 1) / 2 + 16 : 0;
  scratch.resize(size_t(f32_floats + bf16_floats));
  float* next = scratch.data();                              // [rows, cols] next iterate
  float* gram = next + n;                                    // [m, m] A
  float* poly = gram + m * m;                                // [m, m] B = b·A + c·A·A
  uint16_t* xb = reinterpret_cast<uint16_t*>(poly + m * m);  // [rows, cols] bf16(X)
  uint16_t* gb = xb + n;                                     // [m, m] bf16(A)
  uint16_t* pb = gb + m * m;                                 // [m, m] bf16(B)
  float* work = X;  // the iterate, in place; it ends in X (copied back if the swaps leave it in `next`)

  const float inv_norm = float(1.0 / (std::sqrt(sum_squares(X, n)) + 1e-7));
  for_chunks(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) work[i] *= inv_norm;
  });

  const float a = cfg.ns_coefficients[0], b = cfg.ns_coefficients[1], c = cfg.ns_coefficients[2];
  // The products' operands: the fp32 matrices, or their bf16 roundings (the iterate, A and B stay fp32 and
  // every product accumulates in fp32; only what enters a product is rounded, as vdpbf16ps needs).
  auto op = [&](const float* f, const uint16_t* h, int64_t ld, bool trans) -> MatRef {
    if (!bf16) return mat(f, ld, trans);
    return {h, DType::BF16, ld, trans};
  };
  for (int it = 0; it < cfg.ns_steps; it++) {
    if (bf16) round_to_bf16(xb, work, n);
    // A: X·Xᵀ (wide: X is [m, k]) or Xᵀ·X (tall: X is [k, m]); leading dimension = cols either way.
    gemm(m, m, k, 1.0f, op(work, xb, cols, tall), op(work, xb, cols, !tall), 0.0f, gram, m);
    if (bf16) round_to_bf16(gb, gram, m * m);
    gemm(m, m, m, c, op(gram, gb, m, false), op(gram, gb, m, false), 0.0f, poly, m);
    add_scaled(poly, gram, b, m * m);
    if (bf16) round_to_bf16(pb, poly, m * m);
    scale_into(next, work, a, n);
    if (tall)  // X·B: [k, m]·[m, m]
      gemm(k, m, m, 1.0f, op(work, xb, cols, false), op(poly, pb, m, false), 1.0f, next, cols);
    else  // B·X: [m, m]·[m, k]
      gemm(m, k, m, 1.0f, op(poly, pb, m, false), op(work, xb, cols, false), 1.0f, next, cols);
    std::swap(work, next);
  }
  if (work != X) std::copy(work, work + n, X);
}

double newton_schulz_flops(int64_t rows, int64_t cols, int ns_steps) {
  const double s = double(std::min(rows, cols)), l = double(std::max(rows, cols));
  return ns_steps * (4 * s * s * l + 2 * s * s * s);
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
// grad_scale != 1: the scaled gradient is stored into `update` first and read back from there, so the
// momentum's mu·buf + g sees the very value a clipping pass would have stored (no fma contraction of the
// scaling into it).
void muon_matrix(float* w, const float* g, float* buf, int64_t rows, int64_t cols, float decay, float step,
                 float grad_scale, const MuonConfig& cfg, float* update, std::vector<float>& scratch) {
  const int64_t n = rows * cols;
  const float mu = cfg.momentum;
  if (grad_scale != 1.0f) {
    for (int64_t i = 0; i < n; i++) update[i] = g[i] * grad_scale;
    g = update;  // the loops below read g[i] before they write update[i]
  }
  if (mu == 0.0f) {
    if (g != update) std::copy(g, g + n, update);
  } else {
    for (int64_t i = 0; i < n; i++) {
      buf[i] = mu * buf[i] + g[i];
      update[i] = cfg.nesterov ? g[i] + mu * buf[i] : buf[i];
    }
  }
  newton_schulz(update, rows, cols, cfg, scratch);
  for (int64_t i = 0; i < n; i++) w[i] = w[i] * decay - step * update[i];
}

// Up to this many elements per matrix one thread per matrix beats all threads on each matrix's GEMMs (bf16,
// 2 threads: 8 experts of 512x256 258 vs 230 GFLOP/s, bench/optim_bench BM_MuonExperts).
constexpr int64_t kPerThreadMatrixElements = 512 * 512;
}  // namespace

void muon_update(float* value, const float* grad, float* momentum, int64_t batch, int64_t rows, int64_t cols,
                 float lr, float weight_decay, const MuonConfig& cfg, std::vector<float>& scratch,
                 float grad_scale) {
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
        muon_matrix(value + e * n, grad + e * n, buf_of(e), rows, cols, decay, step, grad_scale, cfg,
                    update.data(), local_scratch);
    }
    return;
  }
  std::vector<float> update(static_cast<size_t>(n));
  for (int64_t e = 0; e < batch; e++)
    muon_matrix(value + e * n, grad + e * n, buf_of(e), rows, cols, decay, step, grad_scale, cfg,
                update.data(), scratch);
}

}  // namespace zaya::train
