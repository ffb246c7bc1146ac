// zaya bench eval (apps/zaya/bench_eval.h): tokens/s of scoring HellaSwag-shaped loglikelihood requests with
// a shared context (eval/loglikelihood.h) and with every choice as its own sequence, measured in one run,
// alternating, median of the repeats; the two runs' loglikelihoods compared. One JSON line on stdout.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_eval.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/threads.h"
#include "eval/loglikelihood.h"
#include "model/zaya-init.h"
#include "model/zaya.h"

namespace zaya::app {

void add_bench_eval_options(CLI::App& sub, BenchEvalOptions& o) {
  auto* m = sub.add_option("--model", o.model_dir, "HF checkpoint directory (float or quantized)");
  sub.add_option("--config", o.config, "model config.json (random initialisation)")->excludes(m);
  sub.add_option("--items", o.items, "questions")->check(CLI::PositiveNumber)->capture_default_str();
  sub.add_option("--context", o.context, "context tokens per question")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  sub.add_option("--continuation", o.continuation, "tokens per choice")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--choices", o.choices, "choices per question")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--batch-tokens", o.batch_tokens, "tokens per forward")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--dtype", o.dtype, "GEMM compute dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  sub.add_option("--repeats", o.repeats, "timed runs of each way after a warm-up (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--seed", o.seed, "weights / tokens seed");
  sub.add_option("--way", o.way, "both, or only one way (to profile it with ZAYA_PROFILE=1)")
      ->check(CLI::IsMember({"both", "shared", "separate"}));
  add_load_flags(sub, o.semantics);
}

int bench_eval(const BenchEvalOptions& o) {
  ZAYA_CHECK(!o.model_dir.empty() || !o.config.empty(), "zaya bench eval needs --model DIR or --config FILE");
  const DType dt = o.dtype == "bf16" ? DType::BF16 : DType::F32;
  ZayaModel model;
  if (!o.model_dir.empty()) {
    LoadOptions lo;
    lo.compute = dt;
    o.semantics.apply(lo);
    model = ZayaModel::load(o.model_dir, lo);
  } else {
    model.cfg = load_config(o.config);
    apply_semantics(model.cfg, o.semantics.get(), o.config);
    model.w = init_weights(model.cfg, dt, o.seed);
  }
  const int64_t V = model.cfg.vocab_size;
  // Requests: per question a context [bos, random...] and `choices` random continuations; the model reads
  // context + continuation[:-1] and scores the continuation (eval/requests.h).
  std::mt19937 rng(uint32_t(o.seed) + 7);
  auto token = [&] { return int32_t(3 + rng() % uint32_t(V - 3)); };
  std::vector<eval::ScoringInput> reqs;
  std::vector<int64_t> group;
  int64_t tokens = 0;
  for (int64_t q = 0; q < o.items; q++) {
    std::vector<int32_t> ctx{int32_t(model.cfg.bos_token_id)};
    while (int64_t(ctx.size()) < o.context) ctx.push_back(token());
    for (int64_t c = 0; c < o.choices; c++) {
      eval::ScoringInput r;
      for (int64_t j = 0; j < o.continuation; j++) r.continuation.push_back(token());
      r.input = ctx;
      r.input.insert(r.input.end(), r.continuation.begin(), r.continuation.end() - 1);
      tokens += int64_t(r.input.size());
      reqs.push_back(std::move(r));
      group.push_back(q);
    }
  }
  eval::ScoreOptions shared, separate;
  shared.batch_tokens = separate.batch_tokens = o.batch_tokens;
  separate.share_context = false;
  std::vector<double> t_shared, t_separate;
  std::vector<eval::LoglikelihoodResult> a, b;
  eval::ScoreStats st_shared, st_separate;
  for (int r = 0; r <= o.repeats; r++) {  // r == 0: warm-up
    for (int way = 0; way < 2; way++) {
      if ((way == 0 && o.way == "separate") || (way == 1 && o.way == "shared")) continue;
      const auto t0 = std::chrono::steady_clock::now();
      if (way == 0)
        a = eval::score_requests(model, reqs, group, shared, &st_shared);
      else
        b = eval::score_requests(model, reqs, group, separate, &st_separate);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) (way == 0 ? t_shared : t_separate).push_back(s);
      std::fprintf(stderr, "bench eval: %s %d/%d  %s  %.3f s  %.0f tok/s\n", r ? "run" : "warm-up", r,
                   o.repeats, way == 0 ? "shared context" : "separate    ", s, double(tokens) / s);
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return double(NAN);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (a.empty()) a = b;  // one way only: nothing to compare
  if (b.empty()) b = a;
  double worst = 0;
  int64_t same_pred = 0, greedy_diff = 0;
  for (size_t i = 0; i < reqs.size(); i++) {
    worst = std::max(worst, std::fabs(a[i].loglikelihood - b[i].loglikelihood));
    greedy_diff += a[i].is_greedy != b[i].is_greedy;
  }
  for (int64_t q = 0; q < o.items; q++) {
    int pa = 0, pb = 0;
    for (int64_t c = 1; c < o.choices; c++) {
      const size_t i = size_t(q * o.choices + c);
      if (a[i].loglikelihood > a[size_t(q * o.choices + pa)].loglikelihood) pa = int(c);
      if (b[i].loglikelihood > b[size_t(q * o.choices + pb)].loglikelihood) pb = int(c);
    }
    same_pred += pa == pb;
  }
  const double ms = median(t_shared), mp = median(t_separate);
  nlohmann::json j;
  j["bench"] = "eval";
  j["model"] = o.model_dir.empty() ? o.config : o.model_dir;
  j["dtype"] = o.dtype;
  j["items"] = o.items;
  j["choices"] = o.choices;
  j["context"] = o.context;
  j["continuation"] = o.continuation;
  j["batch_tokens"] = o.batch_tokens;
  j["request_tokens"] = tokens;
  j["tokens_run_shared"] = st_shared.tokens_run;
  j["tokens_run_separate"] = st_separate.tokens_run;
  j["seconds_shared"] = ms;
  j["seconds_separate"] = mp;
  j["tokens_per_s_shared"] = double(tokens) / ms;
  j["tokens_per_s_separate"] = double(tokens) / mp;
  j["speedup"] = mp / ms;
  j["max_abs_ll_diff"] = worst;
  j["same_predictions"] = same_pred;
  j["greedy_flags_differing"] = greedy_diff;
  j["cpu"] = cpu_summary();
  j["omp_wait"] = omp_wait_summary();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace zaya::app
