#include "eval/task_results.h"

#include <map>

#include "core/error.h"
#include "eval/gsm8k.h"

namespace zaya::eval {

namespace {

// The eval docs behind each results key (MMLU: per subject): n-samples "original".
std::map<std::string, int64_t> docs_per_result(const TaskData& data) {
  std::map<std::string, int64_t> n;
  for (const Doc& d : data.eval_docs) n[data.task.name == "mmlu" ? "mmlu_" + d.subject : data.task.name]++;
  return n;
}

TaskResult empty_result(const TaskData& data, const std::string& name, int num_fewshot) {
  TaskResult r;
  r.name = name;
  if (data.task.name == "mmlu" && name != "mmlu") {
    r.alias = name.substr(5);
    const std::string category = mmlu_category(r.alias);
    if (!category.empty()) r.groups.push_back(category);
    r.groups.push_back("mmlu");
  }
  r.version = data.task.version;
  r.num_fewshot = num_fewshot;
  r.docs_in_split = docs_per_result(data)[name];
  return r;
}

}  // namespace

std::vector<TaskResult> multiple_choice_results(const TaskData& data, const std::vector<McItem>& items,
                                                const std::vector<std::vector<double>>& loglikelihoods,
                                                int num_fewshot) {
  ZAYA_CHECK(items.size() == loglikelihoods.size(), data.task.name, ": ", loglikelihoods.size(),
             " scored items for ", items.size(), " items");
  std::vector<TaskResult> out;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < items.size(); i++) {
    auto it = index.find(items[i].task);
    if (it == index.end()) {
      it = index.emplace(items[i].task, out.size()).first;
      TaskResult r = empty_result(data, items[i].task, num_fewshot);
      for (const std::string& m : data.task.metrics)
        r.metrics.push_back({m, "none", Aggregation::Mean, true, {}});
      out.push_back(std::move(r));
    }
    const McScores s = score_multiple_choice(items[i], loglikelihoods[i]);
    for (MetricSamples& m : out[it->second].metrics) {
      if (m.metric == "acc")
        m.values.push_back(s.acc);
      else if (m.metric == "acc_norm")
        m.values.push_back(s.acc_norm);
      else if (m.metric == "acc_bytes")
        m.values.push_back(s.acc_bytes);
      else
        fail(str_cat(data.task.name, ": metric '", m.metric, "' is not a multiple-choice metric"));
    }
  }
  return out;
}

TaskResult loglikelihood_results(const TaskData& data, const std::vector<LlItem>& items,
                                 const std::vector<LoglikelihoodResult>& results, int num_fewshot) {
  ZAYA_CHECK(items.size() == results.size() && !items.empty(), data.task.name, ": ", results.size(),
             " results for ", items.size(), " items");
  TaskResult r = empty_result(data, data.task.name, num_fewshot);
  MetricSamples ppl{"perplexity", "none", Aggregation::Perplexity, false, {}};
  MetricSamples acc{"acc", "none", Aggregation::Mean, true, {}};
  for (const LoglikelihoodResult& x : results) {
    ppl.values.push_back(x.loglikelihood);
    acc.values.push_back(x.is_greedy ? 1.0 : 0.0);
  }
  r.metrics = {ppl, acc};
  return r;
}

TaskResult generation_results(const TaskData& data, const std::vector<GenItem>& items,
                              const std::vector<std::string>& generations, int num_fewshot) {
  ZAYA_CHECK(items.size() == generations.size() && !items.empty(), data.task.name, ": ", generations.size(),
             " generations for ", items.size(), " items");
  TaskResult r = empty_result(data, data.task.name, num_fewshot);
  MetricSamples strict{"exact_match", "strict-match", Aggregation::Mean, true, {}};
  MetricSamples flexible{"exact_match", "flexible-extract", Aggregation::Mean, true, {}};
  for (size_t i = 0; i < items.size(); i++) {
    const std::string text = truncate_at_stop_sequences(generations[i], items[i].until);
    strict.values.push_back(gsm8k_exact_match(gsm8k_strict_match(text), items[i].reference));
    flexible.values.push_back(gsm8k_exact_match(gsm8k_flexible_extract(text), items[i].reference));
  }
  r.metrics = {strict, flexible};
  return r;
}

}  // namespace zaya::eval
