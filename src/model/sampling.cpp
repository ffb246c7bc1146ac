#include "model/sampling.h"

#include <algorithm>
#include <cmath>

namespace zaya {

int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; i++) {
    if (x[i] > x[best]) best = int32_t(i);
  }
  return best;
}

int32_t Sampler::sample(const float* logits, int64_t V) {
  if (cfg_.greedy || cfg_.temperature <= 0.f) return argmax(logits, V);
  cand_.resize(V);
  for (int64_t i = 0; i < V; i++) cand_[i] = {logits[i] / cfg_.temperature, int32_t(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  int64_t k = (cfg_.top_k > 0 && cfg_.top_k < V) ? cfg_.top_k : V;
  if (k < V)
    std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), by_logit);
  else
    std::sort(cand_.begin(), cand_.end(), by_logit);
  cand_.resize(k);
  float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  // Nucleus: keep the smallest prefix whose mass reaches top_p (at least one token).
  int64_t keep = k;
  if (cfg_.top_p < 1.0f) {
    double acc = 0;
    for (int64_t i = 0; i < k; i++) {
      acc += cand_[i].first / sum;
      if (acc >= cfg_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (int64_t i = 0; i < keep; i++) mass += cand_[i].first;
  std::uniform_real_distribution<double> uni(0.0, mass);
  double r = uni(rng_);
  for (int64_t i = 0; i < keep; i++) {
    r -= cand_[i].first;
    if (r <= 0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace zaya
