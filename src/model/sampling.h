// Token sampling from fp32 logits: greedy (argmax, lowest index on ties) or temperature / top-k / top-p
// with a seeded RNG (the ZAYA1-8B report recommends T 1.0 / top-p 0.95, or T 0.6 / top-p 0.95 / top-k 20).
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace zaya {

// The order of processing (vLLM's, which ZAYA1 is served with): logit bias, then the penalties, on the
// logits; temperature; min-p, top-k and top-p on the probabilities; a draw. Greedy takes the argmax of the
// biased and penalised logits.
struct SamplerConfig {
  bool greedy = true;
  float temperature = 1.0f;
  int64_t top_k = 0;   // 0 = off
  float top_p = 1.0f;  // 1 = off
  float min_p = 0.0f;  // 0 = off; keeps tokens with p >= min_p · p_max
  uint64_t seed = 0;
  // Penalties over the sequence's tokens (TokenHistory): OpenAI's additive presence / frequency penalties on
  // the generated tokens (logit -= frequency · count + presence · [count > 0]), and the multiplicative
  // repetition penalty (CTRL, as HF and vLLM) on prompt and generated tokens (logit / p if > 0, else · p).
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits of these token ids
  bool processes_logits() const {
    return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f ||
           !logit_bias.empty();
  }
};

// The tokens of one sequence, for the penalties.
struct TokenHistory {
  std::unordered_map<int32_t, int32_t> generated;  // token -> times generated
  std::unordered_map<int32_t, int32_t> all;        // token -> times in prompt or output
  void add_prompt(const int32_t* ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) all[ids[i]]++;
  }
  void add_generated(int32_t id) {
    generated[id]++;
    all[id]++;
  }
};

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& cfg) : cfg_(cfg), rng_(cfg.seed) {}
  // logits[V] → chosen token id. `history` (may be null: no penalties) feeds the penalties.
  int32_t sample(const float* logits, int64_t V, const TokenHistory* history = nullptr);

 private:
  SamplerConfig cfg_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<float> processed_;  // [V] the biased / penalised logits
};

// Log-probabilities from the model's raw logits (before bias, penalties and temperature, as vLLM reports
// them by default): the chosen token's and the `n` most likely tokens' (ties: lower id first).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};
float token_logprobs(const float* logits, int64_t V, int32_t chosen, int n, std::vector<TokenLogprob>* top);

int32_t argmax(const float* x, int64_t n);

}  // namespace zaya
