// Per-item scores and their aggregation as lm-evaluation-harness computes them
// (EleutherAI/lm-evaluation-harness@4e7e0d4: lm_eval/api/task.py ConfigurableTask.process_results,
// lm_eval/api/metrics.py, lm_eval/evaluator_utils.py _compute_task_aggregations).
//   acc      = [argmax(ll) == gold]
//   acc_norm = [argmax(ll / len(choice)) == gold], len in code points of doc_to_choice (no delimiter)
//   acc_bytes= [argmax(ll / utf-8 bytes of the choice) == gold]
//   argmax is numpy's: the first maximum (a NaN counts as the maximum, the first NaN wins).
//   mean aggregation: its stderr is sample_stddev / sqrt(n) (Bessel), "N/A" for n < 2.
//   perplexity aggregation (LAMBADA): exp(-mean(ll)); its stderr is a bootstrap: 100000 resamples
//   (chunks of 1000 drawn with Random(i).choices, i = 0..99), the sample stddev of the replicates.
#pragma once

#include <cstdint>
#include <vector>

namespace zaya::eval {

struct McItem;

// lm-eval's result of one loglikelihood request (lm_eval/models/huggingface.py _loglikelihood_tokens):
// the sum of log p over the continuation tokens, and whether every one of them is the argmax.
struct LoglikelihoodResult {
  double loglikelihood = 0;
  bool is_greedy = false;
};

// numpy.argmax: the index of the first maximum; the first NaN when there is one. -1 for an empty input.
int argmax_first(const std::vector<double>& values);

struct McScores {
  int pred = -1;                                // argmax of the loglikelihoods
  int pred_norm = -1;                           // argmax of ll / choice_chars
  int pred_bytes = -1;                          // argmax of ll / choice_bytes
  double acc = 0, acc_norm = 0, acc_bytes = 0;  // 1.0 when the prediction is the gold index
};

// Scores one multiple-choice item from its per-choice loglikelihoods ([num_choices]).
McScores score_multiple_choice(const McItem& item, const std::vector<double>& loglikelihoods);

double mean(const std::vector<double>& values);                // sum / n (sequential sum, as Python's)
double sample_stddev(const std::vector<double>& values);       // Bessel-corrected; NaN for n < 2
double mean_stderr(const std::vector<double>& values);         // sample_stddev / sqrt(n); NaN for n < 2
double perplexity(const std::vector<double>& loglikelihoods);  // exp(-mean(ll))

// lm-eval's bootstrap stderr of perplexity(): `iters` replicates in chunks of min(1000, iters), chunk i
// drawn from Python's Random(i) (iters / chunk chunks). NaN for iters <= 0 or fewer than 2 values.
double perplexity_bootstrap_stderr(const std::vector<double>& loglikelihoods, int64_t iters = 100000);

// Groups (MMLU): aggregate_subtask_metrics with weight_by_size (sum m*n / sum n) and
// pooled_sample_stderr: sqrt(sum((n-1) * se^2 * n) / (sum n - k) / sum n).
double size_weighted_mean(const std::vector<double>& metrics, const std::vector<int64_t>& sizes);
double pooled_sample_stderr(const std::vector<double>& stderrs, const std::vector<int64_t>& sizes);

}  // namespace zaya::eval
