#include "eval/task_runner.h"

#include <map>

#include "core/error.h"
#include "eval/metrics.h"
#include "eval/requests.h"
#include "eval/task_results.h"

namespace zaya::eval {

PreparedTask prepare_task(const std::string& name, const std::string& data_dir, int k, int64_t limit,
                          uint64_t seed, const Tokenizer& tok, int64_t context) {
  const Task* known = find_task(name);
  PreparedTask p;
  p.num_fewshot = k >= 0 ? k : (known ? known->default_num_fewshot : 0);
  p.data = load_task(name, data_dir, p.num_fewshot > 0);
  const EncodeFn enc = [&](const std::string& s) { return tok.encode(s, /*add_special_tokens=*/false); };
  auto input = [&](const std::string& ctx, const std::string& cont) {
    return scoring_input(encode_request(ctx, cont, enc, tok.bos_id()), context);
  };
  switch (p.data.task.output_type) {
    case OutputType::MultipleChoice:
      p.mc = build_mc_items(p.data, p.num_fewshot, seed);
      if (limit > 0 && int64_t(p.mc.size()) > limit) p.mc.resize(size_t(limit));
      for (size_t i = 0; i < p.mc.size(); i++)
        for (size_t c = 0; c < p.mc[i].num_choices(); c++) {
          p.requests.push_back(input(p.mc[i].context(c), p.mc[i].continuation(c)));
          p.group.push_back(int64_t(i));
        }
      break;
    case OutputType::Loglikelihood:
      p.ll = build_ll_items(p.data, p.num_fewshot, seed);
      if (limit > 0 && int64_t(p.ll.size()) > limit) p.ll.resize(size_t(limit));
      for (size_t i = 0; i < p.ll.size(); i++) {
        p.requests.push_back(input(p.ll[i].context, p.ll[i].continuation));
        p.group.push_back(int64_t(i));
      }
      break;
    case OutputType::GenerateUntil:
      ZAYA_CHECK(false, "task ", name, " is generative (", output_type_name(p.data.task.output_type),
                 "): it is scored by zaya eval run, not as a loglikelihood task");
  }
  ZAYA_CHECK(!p.requests.empty(), "task ", name, ": no items in ", data_dir, "/", name);
  return p;
}

std::vector<TaskResult> score_task(const ZayaModel& model, const PreparedTask& task,
                                   const ScoreOptions& options, ScoreStats* stats,
                                   const std::function<void(size_t, size_t)>& progress,
                                   std::vector<LoglikelihoodResult>* per_request) {
  const std::vector<LoglikelihoodResult> res =
      score_requests(model, task.requests, task.group, options, stats, progress);
  if (per_request) *per_request = res;
  if (task.data.task.output_type == OutputType::Loglikelihood)
    return {loglikelihood_results(task.data, task.ll, res, task.num_fewshot)};
  std::vector<std::vector<double>> ll(task.mc.size());
  for (size_t r = 0; r < res.size(); r++) ll[size_t(task.group[r])].push_back(res[r].loglikelihood);
  return multiple_choice_results(task.data, task.mc, ll, task.num_fewshot);
}

nlohmann::json request_sample(const PreparedTask& task, size_t r, const LoglikelihoodResult& result) {
  const size_t item = size_t(task.group[r]);
  size_t choice = 0;  // the requests of an item are adjacent, in choice order
  while (r > choice && task.group[r - choice - 1] == int64_t(item)) choice++;
  nlohmann::json j;
  j["task"] = task.data.task.name;
  j["item"] = item;
  j["choice"] = choice;
  if (!task.mc.empty()) {
    const McItem& it = task.mc[item];
    j["doc"] = it.id;
    j["gold"] = it.gold;
    j["context"] = it.context(choice);
    j["continuation"] = it.continuation(choice);
  } else {
    const LlItem& it = task.ll[item];
    j["doc"] = it.id;
    j["context"] = it.context;
    j["continuation"] = it.continuation;
  }
  j["input_tokens"] = task.requests[r].input.size();
  j["continuation_tokens"] = task.requests[r].continuation;
  j["loglikelihood"] = result.loglikelihood;
  j["is_greedy"] = result.is_greedy;
  return j;
}

std::vector<std::pair<std::string, double>> headline_metrics(const std::vector<TaskResult>& results,
                                                             const std::string& task_name) {
  // Pool each metric's per-item values over the results (one for most tasks; MMLU's subjects).
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> pooled;
  for (const TaskResult& r : results)
    for (const MetricSamples& m : r.metrics) {
      if (m.filter != "none") continue;
      auto [it, fresh] = pooled.emplace(m.metric, std::vector<double>{});
      if (fresh) order.push_back(m.metric);
      it->second.insert(it->second.end(), m.values.begin(), m.values.end());
    }
  std::vector<std::pair<std::string, double>> out;
  for (const std::string& metric : order) {
    const std::vector<double>& v = pooled[metric];
    const bool ppl = metric == "perplexity";
    out.emplace_back(task_name + "/" + metric, ppl ? perplexity(v) : mean(v));
  }
  return out;
}

}  // namespace zaya::eval
