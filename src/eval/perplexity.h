// Perplexity with lm-evaluation-harness's `loglikelihood_rolling` semantics (lm_eval/utils.py
// get_rolling_token_windows + make_disjoint_window, and the wikitext task's aggregations):
//
//   A document's tokens t[0, n) are cut into windows of at most `max_len` predicted tokens. The first window
//   predicts t[0, m) (m = min(max_len, n)) from [prefix] + t[0, m-1) (prefix: the BOS token); every later
//   window predicts the next min(n - done, max_len) tokens from the max_len tokens before its last one, of
//   which only the new tokens are scored. Every token is scored exactly once; a document's loglikelihood
//   is the sum over its windows.
//
//   token_perplexity = exp(-Σ ll / Σ tokens), word_perplexity = exp(-Σ ll / Σ words) (words: the pieces of
//   re.split(r"\s+", doc)), byte_perplexity = exp(-Σ ll / Σ utf-8 bytes), bits_per_byte = -Σ ll / Σ bytes /
//   ln 2: sums over all documents first (lm-eval's weighted_perplexity / bits_per_byte aggregations).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/zaya.h"

namespace zaya::eval {

// One scored window: the model reads `input` (its first input predicts continuation[0] when
// input.size() == continuation.size(); the last continuation.size() positions of the input predict the
// continuation).
struct RollingWindow {
  std::vector<int32_t> input;         // [len]: what the model is fed
  std::vector<int32_t> continuation;  // [k <= len]: the tokens scored, predicted by the last k inputs
};

// lm-eval's windows of `tokens` (see above); empty tokens give no window.
std::vector<RollingWindow> rolling_windows(const std::vector<int32_t>& tokens, int32_t prefix,
                                           int64_t max_len);

// Words as lm-eval's wikitext counts them: len(re.split(r"\s+", text)) (a leading or trailing space adds an
// empty piece, as in Python).
int64_t count_words(const std::string& text);

struct PerplexityTotals {
  double loglikelihood = 0;  // Σ ln p over every scored token
  int64_t documents = 0, tokens = 0, words = 0, bytes = 0;
  double token_perplexity() const;
  double word_perplexity() const;  // NaN when words are unknown (0)
  double byte_perplexity() const;
  double bits_per_byte() const;
};

// Sum of ln p(continuation) for each window, running rows of equal length together (up to `batch` rows a
// forward). `progress(done, total)` after each forward (nullable).
std::vector<double> score_windows(const ZayaModel& model, const std::vector<RollingWindow>& windows,
                                  int64_t batch,
                                  const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace zaya::eval
