// Token sampling from fp32 logits: greedy (argmax, lowest index on ties) or temperature / top-k / top-p
// with a seeded RNG (the ZAYA1-8B report recommends T 1.0 / top-p 0.95, or T 0.6 / top-p 0.95 / top-k 20).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace zaya {

struct SamplerConfig {
  bool greedy = true;
  float temperature = 1.0f;
  int64_t top_k = 0;   // 0 = off
  float top_p = 1.0f;  // 1 = off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& cfg) : cfg_(cfg), rng_(cfg.seed) {}
  // logits[V] → chosen token id.
  int32_t sample(const float* logits, int64_t V);

 private:
  SamplerConfig cfg_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(const float* x, int64_t n);

}  // namespace zaya
