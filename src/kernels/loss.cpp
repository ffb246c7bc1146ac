#include "kernels/loss.h"

#include <cmath>

#include "core/error.h"

namespace zaya {

double cross_entropy_forward(float* per_token, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t* count) {
  double total = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < N; i++) {
    if (per_token) per_token[i] = 0.f;
    if (targets[i] == -100) continue;
    ZAYA_CHECK(targets[i] >= 0 && targets[i] < V, "target ", targets[i], " at position ", i,
               " is outside the vocabulary [0, ", V, ") and is not -100");
    const float* row = logits + i * V;
    float mx = row[0];
    for (int64_t v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) sum += std::exp(double(row[v] - mx));
    double loss = std::log(sum) + mx - row[targets[i]];
    if (per_token) per_token[i] = float(loss);
    total += loss;
    n++;
  }
  if (count) *count = n;
  return n ? total / double(n) : 0.0;
}

double cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                              int64_t V, float scale, int64_t* count) {
  double total = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < N; i++) {
    const float* row = logits + i * V;
    float* drow = dlogits + i * V;
    if (targets[i] == -100) {
      for (int64_t v = 0; v < V; v++) drow[v] = 0.f;
      continue;
    }
    ZAYA_CHECK(targets[i] >= 0 && targets[i] < V, "target ", targets[i], " at position ", i,
               " is outside the vocabulary [0, ", V, ") and is not -100");
    float mx = row[0];
    for (int64_t v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) sum += std::exp(double(row[v] - mx));
    const double lse = std::log(sum) + mx;
    total += lse - row[targets[i]];
    for (int64_t v = 0; v < V; v++) drow[v] = float(std::exp(double(row[v]) - lse)) * scale;
    drow[targets[i]] -= scale;
    n++;
  }
  if (count) *count = n;
  return total;
}

}  // namespace zaya
