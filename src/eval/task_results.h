// Scores of a task's items -> per-task results (eval/results.h TaskResult) with lm-eval's per-doc metrics
// (lm_eval/api/task.py ConfigurableTask.process_results) and its filters for GSM8K:
//   multiple_choice: acc, acc_norm (as the task lists them) from each choice's loglikelihood;
//   loglikelihood (LAMBADA): perplexity from the doc's loglikelihood, acc = is_greedy;
//   generate_until (GSM8K): exact_match under the "strict-match" and "flexible-extract" filters.
// MMLU items become one TaskResult per subject ("mmlu_SUBJECT", alias SUBJECT, group "mmlu").
#pragma once

#include <string>
#include <vector>

#include "eval/metrics.h"
#include "eval/results.h"
#include "eval/tasks.h"

namespace zaya::eval {

// loglikelihoods[i][c]: item i's choice c. One result per item.task, in first-seen order.
std::vector<TaskResult> multiple_choice_results(const TaskData& data, const std::vector<McItem>& items,
                                                const std::vector<std::vector<double>>& loglikelihoods,
                                                int num_fewshot);

// results[i]: item i's (loglikelihood, is_greedy).
TaskResult loglikelihood_results(const TaskData& data, const std::vector<LlItem>& items,
                                 const std::vector<LoglikelihoodResult>& results, int num_fewshot);

// generations[i]: the text generated for item i (cut again at the item's stop sequences here).
TaskResult generation_results(const TaskData& data, const std::vector<GenItem>& items,
                              const std::vector<std::string>& generations, int num_fewshot);

}  // namespace zaya::eval
