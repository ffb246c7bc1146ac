// zaya eval run / table (apps/zaya/eval_tasks.h): the task layer (src/eval/tasks.h) turned into requests,
// scored with the model (src/eval/loglikelihood.h) or generated with the serving engine (GSM8K), and
// written in lm-eval's results layout (src/eval/results.h).
#include "eval_tasks.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/quant.h"
#include "eval/gsm8k.h"
#include "eval/loglikelihood.h"
#include "eval/requests.h"
#include "eval/results.h"
#include "eval/task_results.h"
#include "eval/task_runner.h"
#include "eval/tasks.h"
#include "io/strict_json.h"
#include "serve/engine.h"
#include "tokenizer/tokenizer.h"

namespace zaya::app {

namespace {

using Clock = std::chrono::steady_clock;

std::string read_whole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A one-line progress bar on stderr: "hellaswag [#####.....] 120/400 requests, 35 s, ETA 80 s". On a
// terminal it is redrawn in place (at most 5 times a second); in a log, a line every 10 seconds.
class EvalProgress {
 public:
  EvalProgress(std::string label, std::string unit, size_t total)
      : label_(std::move(label)),
        unit_(std::move(unit)),
        total_(total),
        tty_(isatty(2) != 0),
        start_(Clock::now()),
        last_(start_) {}
  void update(size_t done) {
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (done < total_ && since < (tty_ ? 0.2 : 10.0)) return;
    last_ = now;
    print(done, done >= total_);
  }

 private:
  void print(size_t done, bool final) {
    const double el = std::chrono::duration<double>(Clock::now() - start_).count();
    const int width = 20, filled = total_ ? int(double(width) * double(done) / double(total_)) : width;
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '.');
    const double eta = done ? el / double(done) * double(total_ - done) : 0.0;
    std::fprintf(stderr, "%s%s [%s] %zu/%zu %s, %.0f s, ETA %.0f s%s", tty_ ? "\r" : "", label_.c_str(),
                 bar.c_str(), done, total_, unit_.c_str(), el, eta, tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }
  std::string label_, unit_;
  size_t total_;
  bool tty_;
  Clock::time_point start_, last_;
};

struct TaskTiming {
  std::string task;
  size_t items = 0, requests = 0;
  double seconds = 0;
  eval::ScoreStats stats;
};

// A loglikelihood task (multiple choice or LAMBADA-style): prepared, scored, its results.
std::vector<eval::TaskResult> run_scored(const ZayaModel& model, const Tokenizer& tok,
                                         const std::string& name, int k, const EvalRunOptions& o,
                                         int64_t context, TaskTiming* timing, std::ofstream* samples) {
  const eval::PreparedTask task = eval::prepare_task(name, o.data_dir, k, o.limit, o.seed, tok, context);
  eval::ScoreOptions so;
  so.batch_tokens = o.batch_tokens;
  so.share_context = o.share_context;
  EvalProgress bar(name, "requests", task.requests.size());
  std::vector<eval::LoglikelihoodResult> per_request;
  auto res = eval::score_task(
      model, task, so, &timing->stats, [&](size_t d, size_t) { bar.update(d); }, &per_request);
  if (samples)
    for (size_t r = 0; r < per_request.size(); r++)
      *samples << eval::request_sample(task, r, per_request[r]).dump() << "\n";
  timing->items = task.mc.size() + task.ll.size();
  timing->requests = task.requests.size();
  return res;
}

// Greedy generation until a stop sequence (lm-eval's generate_until): every item through the serving
// engine's continuous batching; a sequence is cancelled as soon as its text holds a stop sequence.
// With `samples`, one JSON line per item: its prompt tokens, the generated tokens and text, the answer
// each filter extracted and the exact-match scores (tools/reference/eval_ref.py regenerates them).
eval::TaskResult run_generation(const ZayaModel& model, const Tokenizer& tok, const eval::TaskData& data,
                                int k, const EvalRunOptions& o, int64_t context, TaskTiming* timing,
                                std::ofstream* samples) {
  std::vector<eval::GenItem> items = eval::build_gen_items(data, k, o.seed);
  if (o.limit > 0 && int64_t(items.size()) > o.limit) items.resize(size_t(o.limit));
  ZAYA_CHECK(o.max_gen_tokens > 0 && o.max_gen_tokens < context, data.task.name, ": --max-gen-tokens ",
             o.max_gen_tokens, " must be in [1, the context ", context, ")");
  // lm-eval's HF backend adds the EOS token's text to the stop sequences.
  const std::string eos_text = tok.id_to_token(tok.eos_id());
  serve::EngineOptions eo;
  eo.parallel = 8;
  eo.batch_tokens = std::max<int64_t>(o.batch_tokens, 64);
  eo.ctx_size = context;
  eo.queue_size = int64_t(items.size()) + 1;
  eo.cache_prompt = false;
  serve::Engine engine(model, eo);
  struct Running {
    std::shared_ptr<serve::SeqHandle> handle;
    std::vector<int32_t> tokens;
    bool done = false;
  };
  std::vector<Running> run(items.size());
  std::vector<std::vector<int32_t>> prompts(items.size());
  const int64_t max_prompt = context - o.max_gen_tokens;
  for (size_t i = 0; i < items.size(); i++) {
    std::vector<int32_t> prompt{tok.bos_id()};
    const auto body = tok.encode(items[i].context, /*add_special_tokens=*/false);
    prompt.insert(prompt.end(), body.begin(), body.end());
    if (int64_t(prompt.size()) > max_prompt)  // left truncation, as lm-eval's left_truncate_len
      prompt.erase(prompt.begin(), prompt.end() - max_prompt);
    prompts[i] = prompt;
    serve::SeqRequest r;
    r.prompt = std::move(prompt);
    r.sampler.greedy = true;
    r.max_tokens = o.max_gen_tokens;
    r.stop_ids = {tok.eos_id()};
    run[i].handle = engine.submit(std::move(r));
  }
  EvalProgress bar(data.task.name, "generations", items.size());
  size_t finished = 0;
  std::vector<std::string> texts(items.size());
  while (finished < items.size()) {
    bool any = false;
    for (size_t i = 0; i < items.size(); i++) {
      Running& s = run[i];
      if (s.done) continue;
      std::vector<serve::SeqEvent> ev;
      if (!s.handle->wait(ev, 0)) continue;
      any = true;
      bool ended = false, grew = false;
      for (const auto& e : ev) {
        if (e.kind == serve::SeqEvent::Kind::Done) {
          ended = true;
        } else if (e.token != tok.eos_id()) {
          s.tokens.push_back(e.token);
          grew = true;
        }
      }
      if (grew) {
        texts[i] = tok.decode(s.tokens, /*skip_special_tokens=*/true);
        bool stop = false;
        for (const auto& u : items[i].until) stop = stop || texts[i].find(u) != std::string::npos;
        if (stop && !ended) s.handle->cancel();
      }
      if (ended) {
        s.done = true;
        finished++;
        bar.update(finished);
      }
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (size_t i = 0; i < items.size(); i++) items[i].until.push_back(eos_text);
  if (samples)
    for (size_t i = 0; i < items.size(); i++) {
      const std::string text = eval::truncate_at_stop_sequences(texts[i], items[i].until);
      const std::string strict = eval::gsm8k_strict_match(text),
                        flexible = eval::gsm8k_flexible_extract(text);
      nlohmann::json j;
      j["task"] = data.task.name;
      j["item"] = i;
      j["doc"] = items[i].id;
      j["context"] = items[i].context;
      j["until"] = items[i].until;
      j["max_gen_tokens"] = o.max_gen_tokens;
      j["prompt_tokens"] = prompts[i];
      j["generated_tokens"] = run[i].tokens;
      j["stop_token_ids"] = {tok.eos_id()};
      j["generation"] = text;
      j["reference"] = items[i].reference;
      j["strict_match"] = strict;
      j["flexible_extract"] = flexible;
      j["exact_match_strict"] = eval::gsm8k_exact_match(strict, items[i].reference);
      j["exact_match_flexible"] = eval::gsm8k_exact_match(flexible, items[i].reference);
      *samples << j.dump() << "\n";
    }
  timing->items = items.size();
  timing->requests = items.size();
  return eval::generation_results(data, items, texts, k);
}

}  // namespace

int eval_run(const EvalRunOptions& o) {
  const auto t0 = Clock::now();
  ZAYA_CHECK(!o.tasks.empty(), "zaya eval run: --tasks names no task");
  LoadOptions lo;
  lo.compute = o.dtype == "bf16" ? DType::BF16 : DType::F32;
  lo.semantics = o.semantics;
  lo.in_memory = o.in_memory;
  const ZayaModel model = ZayaModel::load(o.model_dir, lo);
  const std::string tpath = o.tokenizer.empty() ? o.model_dir + "/tokenizer.json" : o.tokenizer;
  const Tokenizer tok = Tokenizer::load(tpath);
  const int64_t context =
      o.context > 0 ? o.context : std::min<int64_t>(model.cfg.max_position_embeddings, 2048);

  std::vector<eval::TaskResult> results;
  std::vector<TaskTiming> timings;
  std::unique_ptr<std::ofstream> samples;
  if (!o.log_samples.empty()) {
    samples = std::make_unique<std::ofstream>(o.log_samples, std::ios::binary | std::ios::trunc);
    ZAYA_CHECK(samples->good(), o.log_samples, ": cannot write the samples");
  }
  for (const std::string& name : o.tasks) {
    const auto ts = Clock::now();
    const eval::Task* known = eval::find_task(name);
    const int k = o.num_fewshot >= 0 ? o.num_fewshot : (known ? known->default_num_fewshot : 0);
    TaskTiming timing;
    timing.task = name;
    if (known && known->output_type == eval::OutputType::GenerateUntil) {
      const eval::TaskData data = eval::load_task(name, o.data_dir, k > 0);
      results.push_back(run_generation(model, tok, data, k, o, context, &timing, samples.get()));
    } else {
      auto r = run_scored(model, tok, name, k, o, context, &timing, samples.get());
      results.insert(results.end(), r.begin(), r.end());
    }
    timing.seconds = std::chrono::duration<double>(Clock::now() - ts).count();
    std::fprintf(stderr,
                 "%s: %zu items, %zu requests, %.1f s, %.0f tokens/s read (%lld saved by shared contexts)\n",
                 name.c_str(), timing.items, timing.requests, timing.seconds,
                 double(timing.stats.tokens_run) / std::max(timing.seconds, 1e-9),
                 static_cast<long long>(timing.stats.tokens_saved));
    timings.push_back(timing);
  }

  eval::ModelInfo info;
  info.model = o.model_dir;
  info.config_hash = eval::config_hash(read_whole(o.model_dir + "/config.json"));
  const DType experts = model.w.layers[0].experts_gate_up.dtype;
  info.extra["weights"] = is_quantized(experts) ? quant_scheme_name(experts) : dtype_name(experts);
  info.extra["compute_dtype"] = o.dtype;
  info.extra["context"] = context;
  info.extra["tokenizer"] = tpath;
  info.extra["num_fewshot"] = o.num_fewshot;
  info.extra["limit"] = o.limit > 0 ? nlohmann::json(o.limit) : nlohmann::json(nullptr);
  info.extra["fewshot_seed"] = o.seed;
  info.extra["share_context"] = o.share_context;
  nlohmann::json j = eval::results_json(results, info, o.bootstrap_iters);
  nlohmann::json speed = nlohmann::json::object();
  for (const auto& t : timings)
    speed[t.task] = {{"items", t.items},
                     {"requests", t.requests},
                     {"seconds", t.seconds},
                     {"forwards", t.stats.forwards},
                     {"tokens_run", t.stats.tokens_run},
                     {"tokens_saved_by_shared_context", t.stats.tokens_saved},
                     {"tokens_scored", t.stats.tokens_scored}};
  j["zaya_speed"] = speed;
  j["total_evaluation_time_seconds"] =
      std::to_string(std::chrono::duration<double>(Clock::now() - t0).count());
  if (!o.output.empty()) {
    std::ofstream f(o.output, std::ios::binary | std::ios::trunc);
    ZAYA_CHECK(f.good(), o.output, ": cannot write the results");
    f << j.dump(2) << "\n";
    ZAYA_CHECK(f.good(), o.output, ": write failed");
    std::fprintf(stderr, "results: %s\n", o.output.c_str());
  }
  std::printf("%s", eval::markdown_table({j}).c_str());
  return 0;
}

int eval_table(const std::vector<std::string>& files) {
  ZAYA_CHECK(!files.empty(), "zaya eval table: no results files");
  std::vector<nlohmann::json> all;
  for (const auto& f : files) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_whole(f));
    } catch (const nlohmann::json::exception& e) {
      ZAYA_CHECK(false, f, ": not JSON (", e.what(), ")");
    }
    ZAYA_CHECK(
        j.is_object() && j.contains("results") && j["results"].is_object(), f,
        ": not a results file (expected an object with \"results\", as zaya eval run and lm-eval write)");
    all.push_back(std::move(j));
  }
  std::printf("%s", eval::markdown_table(all).c_str());
  return 0;
}

}  // namespace zaya::app
