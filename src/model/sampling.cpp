#include "model/sampling.h"

#include <algorithm>
#include <cmath>

namespace zaya {

// The first index of the largest element (NaNs never win; a NaN at 0 gives 0), as the plain loop
// `if (x[i] > x[best]) best = i` finds it, in 16 independent lanes the compiler vectorises (lane l keeps its
// first maximum over i = l mod 16), then the lanes' maxima, the smallest index among equal ones. The plain
// loop took ~160 us over a 32k vocabulary on the serving machine (a dependent load and branch per element):
// every greedy token of `zaya serve` and `zaya generate` paid it.
int32_t argmax(const float* x, int64_t n) {
  if (n <= 0) return 0;
  constexpr int L = 16;
  float m[L];
  int32_t idx[L];
  for (int l = 0; l < L; l++) {
    m[l] = x[0];
    idx[l] = 0;
  }
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; l++) {
      const bool gt = x[i + l] > m[l];
      m[l] = gt ? x[i + l] : m[l];
      idx[l] = gt ? int32_t(i + l) : idx[l];
    }
  int32_t best = idx[0];
  float bm = m[0];
  for (int l = 1; l < L; l++)
    if (m[l] > bm || (m[l] == bm && idx[l] < best)) {
      bm = m[l];
      best = idx[l];
    }
  for (; i < n; i++)
    if (x[i] > bm) {
      bm = x[i];
      best = int32_t(i);
    }
  return best;
}

int32_t Sampler::sample(const float* logits, int64_t V, const TokenHistory* history) {
  if (cfg_.processes_logits()) {
    processed_.assign(logits, logits + V);
    for (const auto& [id, bias] : cfg_.logit_bias)
      if (id >= 0 && id < V) processed_[id] += bias;
    if (history) {
      if (cfg_.repetition_penalty != 1.f)
        for (const auto& [id, n] : history->all) {
          if (id < 0 || id >= V) continue;
          float& l = processed_[id];
          l = l > 0 ? l / cfg_.repetition_penalty : l * cfg_.repetition_penalty;
        }
      if (cfg_.presence_penalty != 0.f || cfg_.frequency_penalty != 0.f)
        for (const auto& [id, n] : history->generated)
          if (id >= 0 && id < V) processed_[id] -= cfg_.frequency_penalty * float(n) + cfg_.presence_penalty;
    }
    logits = processed_.data();
  }
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
  // min-p: the tokens at least min_p times as likely as the most likely one (a prefix: sorted).
  if (cfg_.min_p > 0.f) {
    const float cut = cfg_.min_p * cand_[0].first;  // cand_[0] is the max, exp(0) = 1
    int64_t n = 1;
    while (n < k && cand_[n].first >= cut) n++;
    k = n;
    cand_.resize(k);
    sum = 0;
    for (const auto& c : cand_) sum += c.first;
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

float token_logprobs(const float* logits, int64_t V, int32_t chosen, int n, std::vector<TokenLogprob>* top) {
  float mx = logits[0];
  for (int64_t i = 1; i < V; i++) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; i++) sum += std::exp(double(logits[i]) - mx);
  const double lse = double(mx) + std::log(sum);
  if (top) {
    top->clear();
    if (n > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(V));
      for (int64_t i = 0; i < V; i++) ids[size_t(i)] = int32_t(i);
      const int64_t m = std::min<int64_t>(n, V);
      std::partial_sort(ids.begin(), ids.begin() + m, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (int64_t i = 0; i < m; i++)
        top->push_back({ids[size_t(i)], float(double(logits[ids[size_t(i)]]) - lse)});
    }
  }
  return float(double(logits[chosen]) - lse);
}

}  // namespace zaya
