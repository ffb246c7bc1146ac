#include "eval/results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"
#include "eval/metrics.h"

namespace zaya::eval {

using nlohmann::json;

std::string config_hash(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h);
  return buf;
}

namespace {

json number_or_na(double v) {
  return std::isnan(v) ? json("N/A") : json(v);
}

struct Summary {
  double value = 0, stderr_ = 0;
  int64_t n = 0;
};

Summary summarize(const MetricSamples& m, int64_t bootstrap_iters) {
  ZAYA_CHECK(!m.values.empty(), "metric ", m.metric, ": no samples");
  Summary s;
  s.n = int64_t(m.values.size());
  const bool with_stderr = bootstrap_iters > 0;
  if (m.aggregation == Aggregation::Perplexity) {
    s.value = perplexity(m.values);
    s.stderr_ = with_stderr ? perplexity_bootstrap_stderr(m.values, bootstrap_iters) : NAN;
  } else {
    s.value = mean(m.values);
    s.stderr_ = with_stderr ? mean_stderr(m.values) : NAN;
  }
  return s;
}

// lm-eval's group_alias of the MMLU groups; other groups go by their name.
std::string group_alias(const std::string& group) {
  if (group == "mmlu_stem") return "stem";
  if (group == "mmlu_humanities") return "humanities";
  if (group == "mmlu_social_sciences") return "social sciences";
  if (group == "mmlu_other") return "other";
  return group;
}

std::string key(const std::string& metric, const std::string& filter) {
  return metric + "," + filter;
}
std::string stderr_key(const std::string& metric, const std::string& filter) {
  return metric + "_stderr," + filter;
}

}  // namespace

json results_json(const std::vector<TaskResult>& tasks, const ModelInfo& model, int64_t bootstrap_iters) {
  json out;
  json results = json::object(), groups = json::object(), subtasks = json::object();
  json versions = json::object(), nshot = json::object(), hib = json::object(), nsamples = json::object();
  struct GroupAcc {
    std::map<std::string, std::vector<double>> values, stderrs;  // by "metric,filter"
    std::map<std::string, std::vector<int64_t>> sizes;
    std::map<std::string, std::pair<std::string, std::string>> names;
    std::map<std::string, bool> higher;
    std::vector<std::string> order;
    std::set<int> nshots;
    int64_t sample_len = 0;
  };
  std::map<std::string, GroupAcc> group_acc;
  for (const TaskResult& t : tasks) {
    json entry;
    entry["name"] = t.name;
    entry["alias"] = t.alias.empty() ? t.name : t.alias;
    int64_t effective = 0;
    for (const MetricSamples& m : t.metrics) {
      const Summary s = summarize(m, bootstrap_iters);
      entry[key(m.metric, m.filter)] = s.value;
      entry[stderr_key(m.metric, m.filter)] = number_or_na(s.stderr_);
      hib[t.name][m.metric] = m.higher_is_better;
      effective = s.n;
      for (const std::string& group : t.groups) {
        GroupAcc& g = group_acc[group];
        const std::string k = key(m.metric, m.filter);
        if (!g.values.count(k)) g.order.push_back(k);
        g.values[k].push_back(s.value);
        g.stderrs[k].push_back(s.stderr_);
        g.sizes[k].push_back(s.n);
        g.names[k] = {m.metric, m.filter};
        g.higher[m.metric] = m.higher_is_better;
      }
    }
    entry["sample_len"] = effective;
    results[t.name] = entry;
    versions[t.name] = t.version;
    nshot[t.name] = t.num_fewshot;
    nsamples[t.name] = {{"original", t.docs_in_split}, {"effective", effective}};
    for (size_t i = 0; i < t.groups.size(); i++) {
      const std::string& child = i == 0 ? t.name : t.groups[i - 1];
      json& children = subtasks[t.groups[i]];
      if (std::find(children.begin(), children.end(), child) == children.end()) children.push_back(child);
      group_acc[t.groups[i]].nshots.insert(t.num_fewshot);
      group_acc[t.groups[i]].sample_len += effective;
    }
  }
  for (auto& [name, g] : group_acc) {
    json entry;
    entry["name"] = name;
    entry["alias"] = group_alias(name);
    entry["sample_len"] = g.sample_len;
    for (const std::string& k : g.order) {
      const auto& [metric, filter] = g.names[k];
      entry[k] = size_weighted_mean(g.values[k], g.sizes[k]);
      bool all_stderrs = true;
      for (double se : g.stderrs[k]) all_stderrs = all_stderrs && !std::isnan(se);
      entry[stderr_key(metric, filter)] =
          all_stderrs ? json(pooled_sample_stderr(g.stderrs[k], g.sizes[k])) : json("N/A");
      hib[name][metric] = g.higher[metric];
    }
    results[name] = entry;
    groups[name] = entry;
    versions[name] = name.rfind("mmlu", 0) == 0 ? 2.0 : 1.0;  // mmlu/default/_mmlu*.yaml metadata.version
    if (g.nshots.size() == 1) nshot[name] = *g.nshots.begin();
  }
  out["results"] = results;
  if (!groups.empty()) out["groups"] = groups;
  out["group_subtasks"] = subtasks;
  out["versions"] = versions;
  out["n-shot"] = nshot;
  out["higher_is_better"] = hib;
  out["n-samples"] = nsamples;
  json config = model.extra.is_object() ? model.extra : json::object();
  config["model"] = model.model;
  config["model_config_hash"] = model.config_hash;
  config["bootstrap_iters"] = bootstrap_iters;
  out["config"] = config;
  return out;
}

namespace {

std::string cell(const json& task_entry, const std::string& metric_key) {
  if (!task_entry.is_object() || !task_entry.contains(metric_key) || !task_entry[metric_key].is_number())
    return "—";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f", task_entry[metric_key].get<double>());
  std::string out = buf;
  const size_t comma = metric_key.find(',');
  const std::string se_key = metric_key.substr(0, comma) + "_stderr" + metric_key.substr(comma);
  if (task_entry.contains(se_key) && task_entry[se_key].is_number()) {
    std::snprintf(buf, sizeof(buf), " ± %.4f", task_entry[se_key].get<double>());
    out += buf;
  }
  return out;
}

}  // namespace

std::string markdown_table(const std::vector<json>& result_files) {
  // rows: task -> metric keys in first-seen order
  std::map<std::string, std::vector<std::string>> rows;
  for (const json& f : result_files) {
    ZAYA_CHECK(f.is_object() && f.contains("results") && f["results"].is_object(),
               "a results file needs a \"results\" object");
    for (const auto& [task, entry] : f["results"].items()) {
      if (!entry.is_object()) continue;
      std::vector<std::string>& keys = rows[task];
      for (const auto& [k, v] : entry.items()) {
        if (k.find(',') == std::string::npos || k.find("_stderr,") != std::string::npos) continue;
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      }
    }
  }
  std::string out = "| task | metric |";
  for (size_t i = 0; i < result_files.size(); i++) {
    const json& f = result_files[i];
    std::string label = str_cat("model ", i + 1);
    if (f.contains("config") && f["config"].contains("model") && f["config"]["model"].is_string())
      label = f["config"]["model"].get<std::string>();
    out += " " + label + " |";
  }
  out += "\n|---|---|";
  for (size_t i = 0; i < result_files.size(); i++) out += "---|";
  out += "\n";
  for (const auto& [task, keys] : rows) {
    for (const std::string& k : keys) {
      const size_t comma = k.find(',');
      const std::string filter = k.substr(comma + 1);
      std::string metric = k.substr(0, comma);
      if (filter != "none") metric += " (" + filter + ")";
      out += "| " + task + " | " + metric + " |";
      for (const json& f : result_files) {
        const json& res = f["results"];
        out += " " + cell(res.contains(task) ? res[task] : json(), k) + " |";
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace zaya::eval
