// Perplexity with lm-eval's loglikelihood_rolling semantics (src/eval/perplexity.h).
#include <gtest/gtest.h>

#include <cmath>

#include "eval/perplexity.h"
#include "model/zaya.h"
#include "test_util.h"

namespace zaya::eval {
namespace {

// The windows lm-eval's get_rolling_token_windows + make_disjoint_window give for 10 tokens, max_len 4,
// prefix 2 (worked by hand from lm_eval/utils.py): every token scored once; later windows read max_len
// inputs, the last one a full context of which only the 2 new tokens are scored.
TEST(Perplexity, RollingWindowsAsLmEval) {
  std::vector<int32_t> t;
  for (int i = 10; i < 20; i++) t.push_back(i);
  const auto w = rolling_windows(t, 2, 4);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].input, (std::vector<int32_t>{2, 10, 11, 12}));
  EXPECT_EQ(w[0].continuation, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(w[1].input, (std::vector<int32_t>{13, 14, 15, 16}));
  EXPECT_EQ(w[1].continuation, (std::vector<int32_t>{14, 15, 16, 17}));
  EXPECT_EQ(w[2].input, (std::vector<int32_t>{15, 16, 17, 18}));
  EXPECT_EQ(w[2].continuation, (std::vector<int32_t>{18, 19}));
  // A short document: one window; none for an empty one.
  const auto s = rolling_windows({5, 6}, 2, 4);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].input, (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(s[0].continuation, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(rolling_windows({}, 2, 4).empty());
  // max_len 1: every token predicted from the one before it.
  const auto one = rolling_windows({7, 8, 9}, 2, 1);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[2].input, (std::vector<int32_t>{8}));
  EXPECT_EQ(one[2].continuation, (std::vector<int32_t>{9}));
}

TEST(Perplexity, WordsAsPythonReSplit) {
  EXPECT_EQ(count_words("a b  c"), 3);
  EXPECT_EQ(count_words("a b\n\tc\n"), 4);  // trailing whitespace: an empty last piece
  EXPECT_EQ(count_words(" a"), 2);
  EXPECT_EQ(count_words(""), 1);
}

// A document that fits one window scores what one forward over [BOS] + tokens[:-1] gives, token by token;
// cut into windows of 8, each token keeps a full context of up to 8 and the total stays within the
// difference that a shorter context makes (checked to be finite, negative and close).
TEST(Perplexity, ScoresEqualOneForward) {
  const ZayaModel m = ZayaModel::load(test::golden_dir());
  std::vector<int32_t> t;
  for (int i = 0; i < 20; i++) t.push_back(int32_t(3 + (i * 37) % 500));
  const auto whole = rolling_windows(t, 2, 64);
  const double ll = score_windows(m, whole, 4)[0];
  // Direct: one forward, log-softmax of each next token.
  std::vector<int32_t> in{2};
  in.insert(in.end(), t.begin(), t.end() - 1);
  ZayaCache cache(m.cfg, 1);
  ForwardScratch sc;
  ForwardResult res;
  zaya_forward(m, cache, in.data(), nullptr, 1, int64_t(in.size()), ForwardOptions{}, res, sc);
  const int64_t V = m.cfg.vocab_size;
  double want = 0;
  for (size_t j = 0; j < t.size(); j++) {
    const float* row = res.logits.data() + j * V;
    double mx = row[0], z = 0;
    for (int64_t v = 1; v < V; v++) mx = std::max(mx, double(row[v]));
    for (int64_t v = 0; v < V; v++) z += std::exp(double(row[v]) - mx);
    want += double(row[t[j]]) - mx - std::log(z);
  }
  EXPECT_NEAR(ll, want, 1e-4 * std::fabs(want));
  const auto cut = rolling_windows(t, 2, 8);
  ASSERT_EQ(cut.size(), 3u);
  double sum = 0;
  for (double x : score_windows(m, cut, 2)) sum += x;
  EXPECT_TRUE(std::isfinite(sum) && sum < 0);
  EXPECT_NEAR(sum, want, 0.05 * std::fabs(want));
  // Over the same windows: each window's input through its own forward, the per-token losses of the
  // positions it scores summed, equal the rolling total (1e-5 relative: the same fp32 logits, batched 2 at a
  // time there and alone here).
  double per_window = 0;
  for (const RollingWindow& w : cut) {
    ZayaCache wc(m.cfg, 1);
    ForwardResult wr;
    const int64_t S = int64_t(w.input.size()), k = int64_t(w.continuation.size());
    zaya_forward(m, wc, w.input.data(), nullptr, 1, S, ForwardOptions{}, wr, sc);
    for (int64_t j = 0; j < k; j++) {
      const float* row = wr.logits.data() + (S - k + j) * V;
      double mx = row[0], z = 0;
      for (int64_t v = 1; v < V; v++) mx = std::max(mx, double(row[v]));
      for (int64_t v = 0; v < V; v++) z += std::exp(double(row[v]) - mx);
      per_window += double(row[w.continuation[size_t(j)]]) - mx - std::log(z);
    }
  }
  EXPECT_NEAR(sum, per_window, 1e-5 * std::fabs(per_window));
}

}  // namespace
}  // namespace zaya::eval
