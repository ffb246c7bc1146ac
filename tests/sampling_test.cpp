// Token sampling (model/sampling.h) measured as distributions, and `zaya generate --seed` end to end.
//
// Every statistical check draws from a Sampler with a fixed seed, so each run of the suite sees the same
// numbers; the bars are nevertheless chosen as if the draws were fresh: a chi-square against the
// distribution the docs promise (bar: the 1e-6 upper quantile of chi-square with V-1 degrees of freedom, so
// a correct sampler would fail with probability 1e-6 under any seed) and set membership checks that are
// exact (top-k / top-p never yield a token outside their set, whatever the draw).
#include "model/sampling.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "test_util.h"

using namespace zaya;
namespace fs = std::filesystem;

namespace {

// softmax(logits / T) in fp64: the distribution `Sampler` must draw from with top-k / top-p off.
std::vector<double> softmax_over_t(const std::vector<float>& logits, double T) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); i++) sum += p[i] = std::exp((logits[i] - mx) / T);
  for (double& v : p) v /= sum;
  return p;
}

// n draws of `cfg` on `logits` -> the count of each token id [V].
std::vector<int64_t> draw_counts(const SamplerConfig& cfg, const std::vector<float>& logits, int64_t n) {
  Sampler s(cfg);
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < n; i++) {
    const int32_t id = s.sample(logits.data(), int64_t(logits.size()));
    EXPECT_TRUE(id >= 0 && size_t(id) < logits.size()) << id;
    if (id >= 0 && size_t(id) < logits.size()) counts[size_t(id)]++;
  }
  return counts;
}

// Pearson's chi-square of `counts` against `p` over the tokens with p > 0; a count on a token with p == 0
// makes it +inf (such a draw is impossible, not unlikely).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  const double n = double(std::accumulate(counts.begin(), counts.end(), int64_t(0)));
  double x2 = 0;
  for (size_t i = 0; i < p.size(); i++) {
    if (p[i] == 0) {
      if (counts[i] != 0) return INFINITY;
      continue;
    }
    const double e = n * p[i];
    x2 += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return x2;
}

// The 1e-6 upper quantile of chi-square with df degrees of freedom (regularised gamma, computed offline):
// the bar of every goodness-of-fit check below.
double chi_square_bar(int df) {
  static const std::map<int, double> q = {{1, 23.93}, {2, 27.63}, {3, 30.66}, {4, 33.38},
                                          {5, 35.89}, {6, 38.26}, {7, 40.52}};
  return q.at(df);
}

// Indices of `logits` from the largest down (lowest index first on ties, as Sampler orders them).
std::vector<int32_t> by_logit(const std::vector<float>& logits) {
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return idx;
}

constexpr int64_t kDraws = 40000;

}  // namespace

// Temperature: the empirical distribution of 40,000 draws follows softmax(logits / T) for T = 0.5, 1 and 2
// (a sampler that ignored T would put chi-square in the thousands at T = 0.5 and 2). Measured chi-square
// (7 degrees of freedom): 11.0, 7.8, 7.9 for T = 0.5, 1, 2; bar 40.5 (the 1e-6 quantile). Max deviation of
// a frequency from its probability: measured 0.0026; bar 0.012 (4.6x; ~5 standard deviations of the most
// uncertain frequency, sqrt(0.25 / 40000) = 0.0025).
TEST(Sampling, TemperatureFollowsSoftmaxOfLogitsOverT) {
  const std::vector<float> logits = {2.0f, -0.5f, 1.5f, 0.0f, 1.0f, -2.0f, 0.5f, -1.0f};
  for (float T : {0.5f, 1.0f, 2.0f}) {
    SCOPED_TRACE("T = " + std::to_string(T));
    SamplerConfig cfg;
    cfg.greedy = false;
    cfg.temperature = T;
    cfg.seed = 11;
    const std::vector<int64_t> counts = draw_counts(cfg, logits, kDraws);
    const std::vector<double> p = softmax_over_t(logits, T);
    const double x2 = chi_square(counts, p);
    double dev = 0;
    for (size_t i = 0; i < p.size(); i++) dev = std::max(dev, std::fabs(double(counts[i]) / kDraws - p[i]));
    std::printf("T %.1f: chi-square %.2f (bar %.2f), max |freq - p| %.4f (bar 0.012)\n", T, x2,
                chi_square_bar(7), dev);
    EXPECT_LT(x2, chi_square_bar(7));
    EXPECT_LT(dev, 0.012);
  }
}

// T -> 0 is greedy: temperature 0 (and below) takes the argmax path, and T = 1e-4 on logits whose top gap
// is >= 0.05 makes every other token exp(-500) as likely: 2,000 draws are all the argmax. `greedy` wins
// over any temperature; ties go to the lowest index.
TEST(Sampling, TemperatureToZeroIsGreedy) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 2.f);
  int checked = 0;
  for (int trial = 0; trial < 20; trial++) {
    std::vector<float> logits(100);
    for (float& v : logits) v = nd(rng);
    const std::vector<int32_t> order = by_logit(logits);
    if (logits[order[0]] - logits[order[1]] < 0.05f) continue;  // too close for T = 1e-4
    const int32_t best = argmax(logits.data(), int64_t(logits.size()));
    ASSERT_EQ(best, order[0]);
    checked++;
    for (float T : {0.0f, -1.0f, 1e-4f}) {
      SamplerConfig cfg;
      cfg.greedy = false;
      cfg.temperature = T;
      cfg.seed = uint64_t(trial);
      Sampler s(cfg);
      for (int i = 0; i < 2000; i++) ASSERT_EQ(s.sample(logits.data(), 100), best) << "T " << T;
    }
    SamplerConfig g;  // greedy with a temperature that would otherwise spread the draws
    g.greedy = true;
    g.temperature = 5.0f;
    Sampler s(g);
    for (int i = 0; i < 200; i++) ASSERT_EQ(s.sample(logits.data(), 100), best);
  }
  EXPECT_GE(checked, 10) << "too few logit vectors with a clear argmax";
  const std::vector<float> tie = {0.f, 3.f, 1.f, 3.f};
  EXPECT_EQ(argmax(tie.data(), 4), 1);
  SamplerConfig cold;
  cold.greedy = false;
  cold.temperature = 0.f;
  EXPECT_EQ(Sampler(cold).sample(tie.data(), 4), 1);
}

// top-k: no draw ever falls outside the k largest logits (checked over 40,000 draws, for k = 1, 3, 5 on 50
// random logits at T = 1 and T = 3, where the tail is heavy), and within the k the frequencies follow
// softmax restricted to them. Measured chi-square (k - 1 degrees of freedom): <= 3.9; bar the 1e-6 quantile.
TEST(Sampling, TopKNeverYieldsATokenOutsideTheKBest) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> logits(50);
  for (float& v : logits) v = nd(rng);
  const std::vector<int32_t> order = by_logit(logits);
  for (int64_t k : {1, 3, 5}) {
    for (float T : {1.0f, 3.0f}) {
      SCOPED_TRACE("k " + std::to_string(k) + ", T " + std::to_string(T));
      SamplerConfig cfg;
      cfg.greedy = false;
      cfg.temperature = T;
      cfg.top_k = k;
      cfg.seed = 21;
      const std::vector<int64_t> counts = draw_counts(cfg, logits, kDraws);
      // The expected distribution: softmax(logits / T) over the k best, zero elsewhere.
      std::vector<float> kept(logits.size(), -INFINITY);
      for (int64_t i = 0; i < k; i++) kept[size_t(order[size_t(i)])] = logits[size_t(order[size_t(i)])];
      std::vector<double> p = softmax_over_t(kept, T);
      int64_t outside = 0;
      for (size_t i = 0; i < p.size(); i++)
        if (p[i] == 0) outside += counts[i];
      EXPECT_EQ(outside, 0) << "draws outside the " << k << " best logits";
      for (int64_t i = 0; i < k; i++) EXPECT_GT(counts[size_t(order[size_t(i)])], 0) << "rank " << i;
      if (k > 1) {
        const double x2 = chi_square(counts, p);
        std::printf("top-k %ld T %.0f: chi-square %.2f (bar %.2f)\n", long(k), T, x2,
                    chi_square_bar(int(k - 1)));
        EXPECT_LT(x2, chi_square_bar(int(k - 1)));
      }
    }
  }
}

// top-p (nucleus): the kept set is the smallest prefix of the tokens by probability whose mass reaches p.
// Probabilities 0.40, 0.25, 0.15, 0.10, 0.06, 0.04 (cumulative 0.40, 0.65, 0.80, 0.90, 0.96, 1.00), placed
// at scrambled ids: p = 0.3 keeps 1 token, 0.5 keeps 2, 0.7 keeps 3, 0.85 keeps 4, 0.95 keeps 5, 0.99 all 6
// (no p sits within 0.01 of a cumulative mass, so fp32 rounding cannot move the cut). Over 40,000 draws each
// kept token appears, no other does, and the frequencies follow the renormalised probabilities (measured
// chi-square <= 3.9; bar the 1e-6 quantile). Also with top-k: top-p then applies within the k kept.
TEST(Sampling, TopPKeepsTheSmallestSetWhoseMassReachesP) {
  const std::vector<double> probs = {0.40, 0.25, 0.15, 0.10, 0.06, 0.04};
  const std::vector<int32_t> ids = {4, 0, 5, 2, 1, 3};  // token ids[r] has the r-th largest probability
  std::vector<float> logits(6);
  for (size_t r = 0; r < 6; r++) logits[size_t(ids[r])] = float(std::log(probs[r]));
  for (auto [top_p, keep] : std::vector<std::pair<float, size_t>>{
           {0.3f, 1}, {0.5f, 2}, {0.7f, 3}, {0.85f, 4}, {0.95f, 5}, {0.99f, 6}}) {
    SCOPED_TRACE("top_p " + std::to_string(top_p));
    SamplerConfig cfg;
    cfg.greedy = false;
    cfg.top_p = top_p;
    cfg.seed = 31;
    const std::vector<int64_t> counts = draw_counts(cfg, logits, kDraws);
    std::vector<double> p(6, 0.0);
    double mass = 0;
    for (size_t r = 0; r < keep; r++) mass += probs[r];
    for (size_t r = 0; r < keep; r++) p[size_t(ids[r])] = probs[r] / mass;
    std::set<int32_t> drawn;
    for (int32_t i = 0; i < 6; i++)
      if (counts[size_t(i)] > 0) drawn.insert(i);
    EXPECT_EQ(drawn, std::set<int32_t>(ids.begin(), ids.begin() + long(keep)));
    if (keep > 1) {
      const double x2 = chi_square(counts, p);
      std::printf("top-p %.2f: %zu kept, chi-square %.2f (bar %.2f)\n", top_p, keep, x2,
                  chi_square_bar(int(keep - 1)));
      EXPECT_LT(x2, chi_square_bar(int(keep - 1)));
    }
  }
  // top-k 3 renormalises to 0.50, 0.3125, 0.1875: top-p 0.7 then keeps 2 (0.8125 >= 0.7), where over all
  // six it would keep 3.
  SamplerConfig cfg;
  cfg.greedy = false;
  cfg.top_k = 3;
  cfg.top_p = 0.7f;
  cfg.seed = 32;
  const std::vector<int64_t> counts = draw_counts(cfg, logits, kDraws);
  std::set<int32_t> drawn;
  for (int32_t i = 0; i < 6; i++)
    if (counts[size_t(i)] > 0) drawn.insert(i);
  EXPECT_EQ(drawn, (std::set<int32_t>{ids[0], ids[1]}));
}

// The seed decides the draws: the same seed gives the same 500 tokens (with top-k and top-p on too), and
// another seed other ones (500 draws from 64 near-uniform tokens agree by chance with probability ~1e-900).
TEST(Sampling, SameSeedSameTokensOtherSeedOthers) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); i++) logits[i] = 0.01f * float(i % 7);
  auto draws = [&](uint64_t seed, int64_t top_k, float top_p) {
    SamplerConfig cfg;
    cfg.greedy = false;
    cfg.temperature = 0.9f;
    cfg.top_k = top_k;
    cfg.top_p = top_p;
    cfg.seed = seed;
    Sampler s(cfg);
    std::vector<int32_t> out;
    for (int i = 0; i < 500; i++) out.push_back(s.sample(logits.data(), int64_t(logits.size())));
    return out;
  };
  for (auto [k, p] : std::vector<std::pair<int64_t, float>>{{0, 1.0f}, {40, 0.9f}}) {
    SCOPED_TRACE("top_k " + std::to_string(k) + " top_p " + std::to_string(p));
    EXPECT_EQ(draws(7, k, p), draws(7, k, p));
    EXPECT_NE(draws(7, k, p), draws(8, k, p));
  }
}

namespace {

// `zaya generate` on the golden model's prompts (2 rows of 12 tokens, 16 new tokens each); the parsed
// {"new_tokens": [[...], [...]]}. `args` adds the sampling options.
std::vector<std::vector<int32_t>> generate_cli(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("zaya_sampling_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "out.json").string(), err = (dir / "err.log").string();
  const std::string g = test::golden_dir();
  const int rc = std::system((std::string(ZAYA_BINARY) + " generate --model " + g + " --input " + g +
                              "/inputs.json --json --ignore-eos " + args + " > " + out + " 2> " + err)
                                 .c_str());
  EXPECT_EQ(rc, 0) << test::read_text(err);
  const std::string text = test::read_text(out);
  fs::remove_all(dir);
  auto j = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << text;
  if (j.is_discarded() || !j.contains("new_tokens")) return {};
  return j["new_tokens"].get<std::vector<std::vector<int32_t>>>();
}

}  // namespace

// `zaya generate --temperature T --seed S` is reproducible end to end: the same seed gives the same tokens
// in two processes, another seed other tokens (32 draws at T 1.5 on a random-weight model: the rows differ
// by chance with probability far below 1e-10), and --temperature 0 is the greedy decode (the reference's
// greedy tokens, tests/data/golden).
TEST(Sampling, GenerateWithSeedIsReproducibleEndToEnd) {
  const std::string sampled = "--temperature 1.5 --top-k 200 --top-p 0.98 ";
  const auto a = generate_cli(sampled + "--seed 3"), b = generate_cli(sampled + "--seed 3"),
             c = generate_cli(sampled + "--seed 4");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(a[0].size(), 16u);
  EXPECT_EQ(a, b) << "the same seed must give the same tokens";
  EXPECT_NE(a, c) << "another seed must give other tokens";
  const auto expected = test::read_json(test::golden_dir() + "/expected.json")["generation"]["new_tokens"]
                            .get<std::vector<std::vector<int32_t>>>();
  EXPECT_NE(a, expected) << "T 1.5 sampling reproduced the greedy tokens: it did not sample";
  EXPECT_EQ(generate_cli("--temperature 0 --seed 3"), expected);
}

// ---- min-p, logit bias, penalties, log-probabilities (the server's sampling parameters) ----

// min-p keeps exactly the tokens whose probability is at least min_p times the largest one, and draws from
// them in proportion.
TEST(Sampling, MinPKeepsTokensAboveAFractionOfTheBest) {
  const std::vector<float> logits = {2.0f, 1.5f, 0.2f, -1.0f, 1.9f, -3.0f};
  const std::vector<double> p = softmax_over_t(logits, 1.0);
  const double pmax = *std::max_element(p.begin(), p.end());
  for (float min_p : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(min_p);
    SamplerConfig cfg;
    cfg.greedy = false;
    cfg.min_p = min_p;
    cfg.seed = 17;
    const std::vector<int64_t> counts = draw_counts(cfg, logits, 20000);
    std::vector<double> want(p.size(), 0.0);
    double mass = 0;
    for (size_t i = 0; i < p.size(); i++)
      if (p[i] >= min_p * pmax) mass += want[i] = p[i];
    int kept = 0;
    for (double& w : want) kept += (w /= mass) > 0;
    EXPECT_LE(chi_square(counts, want), chi_square_bar(std::max(1, kept - 1)));
  }
}

// A bias of -100 removes a token; +100 forces it, greedy or not.
TEST(Sampling, LogitBiasShiftsTheLogits) {
  const std::vector<float> logits = {3.0f, 1.0f, 0.5f, 0.0f};
  SamplerConfig cfg;
  cfg.logit_bias = {{0, -100.f}};
  EXPECT_EQ(Sampler(cfg).sample(logits.data(), 4), 1);  // greedy: the best is gone
  cfg.greedy = false;
  cfg.seed = 3;
  const std::vector<int64_t> counts = draw_counts(cfg, logits, 5000);
  EXPECT_EQ(counts[0], 0);
  cfg.logit_bias = {{3, 100.f}};
  const std::vector<int64_t> forced = draw_counts(cfg, logits, 2000);
  EXPECT_EQ(forced[3], 2000);
}

// The penalties change the logits exactly as documented (checked through greedy choices at the margin).
TEST(Sampling, PenaltiesFollowTheirFormulas) {
  const std::vector<float> logits = {2.0f, 1.6f, -1.0f, -1.2f};
  TokenHistory h;
  h.add_generated(0);
  h.add_generated(0);
  SamplerConfig cfg;  // greedy
  // frequency: 2.0 - 0.15 * 2 = 1.7 > 1.6 (token 0 stays); 0.25 * 2 = 0.5 -> 1.5 < 1.6 (token 1 wins).
  cfg.frequency_penalty = 0.15f;
  EXPECT_EQ(Sampler(cfg).sample(logits.data(), 4, &h), 0);
  cfg.frequency_penalty = 0.25f;
  EXPECT_EQ(Sampler(cfg).sample(logits.data(), 4, &h), 1);
  // presence: once, whatever the count: 2.0 - 0.3 = 1.7 stays, 2.0 - 0.5 = 1.5 loses.
  cfg.frequency_penalty = 0;
  cfg.presence_penalty = 0.3f;
  EXPECT_EQ(Sampler(cfg).sample(logits.data(), 4, &h), 0);
  cfg.presence_penalty = 0.5f;
  EXPECT_EQ(Sampler(cfg).sample(logits.data(), 4, &h), 1);
  // Negative penalties encourage repetition.
  cfg.presence_penalty = -1.0f;
  const std::vector<float> l2 = {1.0f, 1.5f};
  EXPECT_EQ(Sampler(cfg).sample(l2.data(), 2, &h), 0);
  // repetition: positive logits divided, negative multiplied, prompt tokens count too.
  SamplerConfig rep;
  rep.repetition_penalty = 1.3f;
  TokenHistory prompt;
  const int32_t ids[] = {0, 2};
  prompt.add_prompt(ids, 2);
  EXPECT_EQ(Sampler(rep).sample(logits.data(), 4, &prompt), 1);  // 2.0 / 1.3 = 1.54 < 1.6
  const std::vector<float> neg = {-1.0f, -1.2f};                 // -1.0 * 1.3 = -1.3 < -1.2
  EXPECT_EQ(Sampler(rep).sample(neg.data(), 2, &prompt), 1);
  rep.repetition_penalty = 1.2f;  // 2.0 / 1.2 = 1.667 > 1.6
  EXPECT_EQ(Sampler(rep).sample(logits.data(), 4, &prompt), 0);
  // Without a history the penalties have nothing to act on.
  EXPECT_EQ(Sampler(cfg).sample(logits.data(), 4, nullptr), 0);
}

// Log-probabilities are log-softmax of the raw logits, the top list sorted, ties by id.
TEST(Sampling, TokenLogprobsAreLogSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f};
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l));
  std::vector<TokenLogprob> top;
  const float lp = token_logprobs(logits.data(), 4, 3, 3, &top);
  EXPECT_LE(test::abs_diff(lp, -2.0 - std::log(sum)), 1e-6);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_LE(test::abs_diff(top[0].logprob, 3.0 - std::log(sum)), 1e-6);
  double mass = 0;
  for (int i = 0; i < 4; i++) mass += std::exp(double(token_logprobs(logits.data(), 4, i, 0, nullptr)));
  EXPECT_LE(test::abs_diff(mass, 1.0), 1e-6);
}

// argmax (greedy decoding) runs in 16 vectorised lanes: the first index of the largest element, NaNs never
// chosen (a NaN first element gives 0), exactly as the plain loop it replaced, on ties, NaNs, infinities
// and every length around the lane count.
TEST(Sampling, ArgmaxIsTheFirstLargestLikeThePlainLoop) {
  auto plain = [](const std::vector<float>& x) {
    int32_t b = 0;
    for (size_t i = 1; i < x.size(); i++)
      if (x[i] > x[size_t(b)]) b = int32_t(i);
    return b;
  };
  std::mt19937 rng(11);
  int cases = 0;
  for (int t = 0; t < 20000; t++) {
    const size_t n = 1 + rng() % (t % 50 == 0 ? 40000 : 70);
    std::vector<float> x(n);
    const int kind = int(rng() % 3);  // few distinct values (ties), normal, {-1, 0, 1}
    for (auto& v : x)
      v = kind == 0   ? float(rng() % 5)
          : kind == 1 ? std::normal_distribution<float>()(rng)
                      : float(int(rng() % 3) - 1);
    if (rng() % 3 == 0) x[rng() % n] = NAN;
    if (rng() % 7 == 0) x[0] = NAN;
    if (rng() % 11 == 0) x[rng() % n] = -INFINITY;
    if (rng() % 13 == 0) x[rng() % n] = INFINITY;
    ASSERT_EQ(argmax(x.data(), int64_t(n)), plain(x)) << "case " << t << ", n " << n;
    cases++;
  }
  EXPECT_EQ(cases, 20000);
}
