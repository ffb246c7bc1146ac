#include "eval/metrics.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "eval/py_random.h"
#include "eval/tasks.h"

namespace zaya::eval {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

int argmax_first(const std::vector<double>& values) {
  int best = -1;
  for (size_t i = 0; i < values.size(); i++) {
    if (std::isnan(values[i])) return int(i);
    if (best < 0 || values[i] > values[size_t(best)]) best = int(i);
  }
  return best;
}

McScores score_multiple_choice(const McItem& item, const std::vector<double>& loglikelihoods) {
  const size_t n = item.num_choices();
  ZAYA_CHECK(loglikelihoods.size() == n, item.id, ": ", loglikelihoods.size(), " loglikelihoods for ", n,
             " choices");
  std::vector<double> per_char(n), per_byte(n);
  for (size_t i = 0; i < n; i++) {
    // numpy float division: x / 0 gives ±inf (or NaN for 0 / 0), as lm-eval's arrays do.
    per_char[i] = loglikelihoods[i] / double(item.choice_chars[i]);
    per_byte[i] = loglikelihoods[i] / double(item.choice_bytes[i]);
  }
  McScores s;
  s.pred = argmax_first(loglikelihoods);
  s.pred_norm = argmax_first(per_char);
  s.pred_bytes = argmax_first(per_byte);
  s.acc = s.pred == item.gold ? 1.0 : 0.0;
  s.acc_norm = s.pred_norm == item.gold ? 1.0 : 0.0;
  s.acc_bytes = s.pred_bytes == item.gold ? 1.0 : 0.0;
  return s;
}

double mean(const std::vector<double>& values) {
  ZAYA_CHECK(!values.empty(), "mean of no values");
  double sum = 0;
  for (double v : values) sum += v;
  return sum / double(values.size());
}

double sample_stddev(const std::vector<double>& values) {
  if (values.size() < 2) return kNaN;
  const double mu = mean(values);
  double ss = 0;
  for (double v : values) ss += (v - mu) * (v - mu);
  return std::sqrt(ss / double(values.size() - 1));
}

double mean_stderr(const std::vector<double>& values) {
  if (values.size() < 2) return kNaN;
  return sample_stddev(values) / std::sqrt(double(values.size()));
}

double perplexity(const std::vector<double>& loglikelihoods) {
  return std::exp(-mean(loglikelihoods));
}

double perplexity_bootstrap_stderr(const std::vector<double>& loglikelihoods, int64_t iters) {
  if (iters <= 0 || loglikelihoods.size() < 2) return kNaN;
  const int64_t chunk = std::min<int64_t>(1000, iters);
  const size_t n = loglikelihoods.size();
  std::vector<double> replicates;
  std::vector<double> resample(n);
  for (int64_t i = 0; i < iters / chunk; i++) {
    PyRandom rnd{uint64_t(i)};
    for (int64_t r = 0; r < chunk; r++) {
      for (size_t j = 0; j < n; j++)
        resample[j] = loglikelihoods[size_t(std::floor(rnd.random() * double(n)))];
      replicates.push_back(perplexity(resample));
    }
  }
  return sample_stddev(replicates);
}

double size_weighted_mean(const std::vector<double>& metrics, const std::vector<int64_t>& sizes) {
  ZAYA_CHECK(metrics.size() == sizes.size() && !sizes.empty(), "size_weighted_mean: ", metrics.size(),
             " metrics for ", sizes.size(), " sizes");
  double num = 0, den = 0;
  for (size_t i = 0; i < sizes.size(); i++) {
    num += metrics[i] * double(sizes[i]);
    den += double(sizes[i]);
  }
  return num / den;
}

double pooled_sample_stderr(const std::vector<double>& stderrs, const std::vector<int64_t>& sizes) {
  ZAYA_CHECK(stderrs.size() == sizes.size() && !sizes.empty(), "pooled_sample_stderr: ", stderrs.size(),
             " stderrs for ", sizes.size(), " sizes");
  double num = 0, total = 0;
  for (size_t i = 0; i < sizes.size(); i++) {
    num += double(sizes[i] - 1) * stderrs[i] * stderrs[i] * double(sizes[i]);
    total += double(sizes[i]);
  }
  const double pooled_var = num / (total - double(sizes.size()));
  return std::sqrt(pooled_var / total);
}

}  // namespace zaya::eval
