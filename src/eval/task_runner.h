// A loglikelihood task made ready to score once and scored as often as wanted (zaya eval run, and every
// evaluation step of training): the task's items (eval/tasks.h), their requests tokenized and truncated with
// lm-eval's rules (eval/requests.h), scored with the model (eval/loglikelihood.h), turned into lm-eval's
// per-task results (eval/task_results.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/loglikelihood.h"
#include "eval/results.h"
#include "eval/tasks.h"
#include "tokenizer/tokenizer.h"

namespace zaya::eval {

struct PreparedTask {
  TaskData data;
  int num_fewshot = 0;
  std::vector<McItem> mc;              // multiple-choice items (output type MultipleChoice)
  std::vector<LlItem> ll;              // loglikelihood items (output type Loglikelihood)
  std::vector<ScoringInput> requests;  // [Σ choices] or [items]: what the model reads and scores
  std::vector<int64_t> group;          // [requests]: the item each request belongs to
};

// Reads task `name` from data_dir and builds its requests: k few-shot examples (k < 0: the task's default),
// the first `limit` items (0: all), lm-eval's draw with `seed`, left truncation to `context` tokens. Throws
// zaya::Error for a generative task (GSM8K: see zaya eval run), and for everything load_task rejects.
PreparedTask prepare_task(const std::string& name, const std::string& data_dir, int k, int64_t limit,
                          uint64_t seed, const Tokenizer& tok, int64_t context);

// Scores every request and returns lm-eval's results for the task (MMLU: one per subject, groups in the
// results JSON). `progress` as score_requests'.
// `per_request` (nullable): each request's (loglikelihood, is_greedy), in task.requests' order.
std::vector<TaskResult> score_task(const ZayaModel& model, const PreparedTask& task,
                                   const ScoreOptions& options, ScoreStats* stats = nullptr,
                                   const std::function<void(size_t, size_t)>& progress = nullptr,
                                   std::vector<LoglikelihoodResult>* per_request = nullptr);

// One line of lm-eval-style per-request samples for request r of `task` (zaya eval run --log-samples):
// the task, the item's doc id and index, the choice, the request's text and tokens, the result.
nlohmann::json request_sample(const PreparedTask& task, size_t r, const LoglikelihoodResult& result);

// The mean of each metric of `results` under the filter "none", keyed "TASK/METRIC" (MMLU subjects are
// averaged over items into "mmlu/acc"): the figures training logs per evaluation.
std::vector<std::pair<std::string, double>> headline_metrics(const std::vector<TaskResult>& results,
                                                             const std::string& task_name);

}  // namespace zaya::eval
