#include "kernels/loss.h"

#include <cmath>

#include "core/error.h"
#include "kernels/vec_math.h"

namespace zaya {

namespace {

// Every target must be a vocabulary id or -100 (checked before the parallel loops, which cannot throw).
void check_targets(const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t i = 0; i < N; i++) {
    ZAYA_CHECK(targets[i] == -100 || (targets[i] >= 0 && targets[i] < V), "target ", targets[i],
               " at position ", i, " is outside the vocabulary [0, ", V, ") and is not -100");
  }
}

}  // namespace

double cross_entropy_forward(float* per_token, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t* count) {
  check_targets(targets, N, V);
  double total = 0;
  int64_t n = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, n) if (N * V > 65536)
  for (int64_t i = 0; i < N; i++) {
    if (per_token) per_token[i] = 0.f;
    if (targets[i] == -100) continue;
    const float* row = logits + i * V;
    const float mx = row_max(row, V);
    const double loss = std::log(exp_shift_sum(nullptr, row, V, mx)) + mx - row[targets[i]];
    if (per_token) per_token[i] = float(loss);
    total += loss;
    n++;
  }
  if (count) *count = n;
  return n ? total / double(n) : 0.0;
}

double cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                              int64_t V, float scale, int64_t* count) {
  check_targets(targets, N, V);
  double total = 0;
  int64_t n = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, n) if (N * V > 65536)
  for (int64_t i = 0; i < N; i++) {
    const float* row = logits + i * V;
    float* drow = dlogits + i * V;
    if (targets[i] == -100) {
      for (int64_t v = 0; v < V; v++) drow[v] = 0.f;
      continue;
    }
    const float x_target = row[targets[i]];  // read before drow (which may alias row) is overwritten
    const float mx = row_max(row, V);
    const double sum = exp_shift_sum(drow, row, V, mx);  // drow = exp(x − max)
    total += std::log(sum) + mx - x_target;
    scale_row(drow, V, float(double(scale) / sum));  // softmax · scale
    drow[targets[i]] -= scale;
    n++;
  }
  if (count) *count = n;
  return total;
}

}  // namespace zaya
