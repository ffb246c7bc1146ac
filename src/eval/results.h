// Evaluation results in lm-evaluation-harness's results-file layout (lm_eval/evaluator_utils.py
// EvalAcc._to_eval_results, _compute_task_aggregations), and a markdown comparison table of several such
// files. Per task (and per group, MMLU):
//   "results": {TASK or GROUP: {"name", "alias", "sample_len", "METRIC,FILTER": value,
//               "METRIC_stderr,FILTER": stderr or "N/A"}},
//   "groups": {GROUP: {...same...}}, "group_subtasks": {GROUP: [direct children: subgroups or tasks]},
//   "versions": {TASK: version}, "n-shot": {TASK: k}, "higher_is_better": {TASK: {METRIC: bool}},
//   "n-samples": {TASK: {"original": docs in the split, "effective": docs scored}},
//   "config": {"model": ..., "model_config_hash": ..., + the caller's fields}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zaya::eval {

enum class Aggregation {
  Mean,        // value = mean, stderr = mean_stderr
  Perplexity,  // value = exp(-mean(ll)), stderr = lm-eval's bootstrap
};

// Every doc's value of one metric under one filter.
struct MetricSamples {
  std::string metric;           // "acc", "acc_norm", "perplexity", "exact_match"
  std::string filter = "none";  // "none", "strict-match", "flexible-extract"
  Aggregation aggregation = Aggregation::Mean;
  bool higher_is_better = true;
  std::vector<double> values;  // [docs scored]: 0/1 scores, or each doc's loglikelihood (perplexity)
};

struct TaskResult {
  std::string name;                 // results key, e.g. "hellaswag", "mmlu_anatomy"
  std::string alias;                // lm-eval's task_alias ("anatomy" for mmlu_anatomy); "" = the name
  std::vector<std::string> groups;  // the groups it counts in, innermost first ({"mmlu_stem", "mmlu"})
  double version = 0;               // the task's metadata.version
  int num_fewshot = 0;
  int64_t docs_in_split = 0;  // n-samples "original"
  std::vector<MetricSamples> metrics;
};

struct ModelInfo {
  std::string model;        // what was evaluated (a path or name): the table's column label
  std::string config_hash;  // identifies the model's configuration (see config_hash())
  nlohmann::json extra = nlohmann::json::object();  // more "config" fields (weights, dtype, context, ...)
};

// FNV-1a 64-bit of `bytes` as 16 hex digits (hash a model's config.json to tell configurations apart).
std::string config_hash(const std::string& bytes);

// The results file for `tasks` (see above). Groups (lm_eval/api/group.py Group.aggregate): a group reports,
// over all its leaf tasks, the size-weighted mean of each metric and its pooled_sample_stderr ("N/A" when
// a leaf's is), as MMLU's aggregate_metric_list (weight_by_size: true) asks; MMLU groups have version 2 and
// aliases "stem", "humanities", "social sciences", "other". `bootstrap_iters` is lm-eval's
// --bootstrap_iters (0: every stderr "N/A").
nlohmann::json results_json(const std::vector<TaskResult>& tasks, const ModelInfo& model,
                            int64_t bootstrap_iters = 100000);

// A markdown table: one row per (task, metric, filter) found in any file, one column per results file
// (labelled by its config.model, else "model N"); cells "value ± stderr" to 4 places, "—" where a file
// lacks the metric. Rows ordered by task name, then metric as the file lists it.
std::string markdown_table(const std::vector<nlohmann::json>& result_files);

}  // namespace zaya::eval
