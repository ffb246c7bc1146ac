// zaya bench serve: serving speed as a client sees it, like `vllm bench serve`. For every concurrency C it
// runs C client threads, each sending streamed requests back to back (a closed loop: C requests in flight),
// over real HTTP, and prints one JSON line: TTFT, TPOT, ITL and end-to-end latency (mean, p50, p99),
// requests/s, output and total tokens/s, and the server's own figures (engine step batches, prefill and
// decode time) when it can read them.
//
// Without --url the server runs in this process (serve::Server, what `zaya serve` runs) on a loopback port,
// over --model DIR or --config CONFIG.json (random weights). Then the run also measures, with the server
// idle, what `zaya generate` and `zaya bench forward` do on the same model (the same code paths without
// HTTP or the engine), reruns concurrency 1 and 8 with the other GEMM mode (batch-invariant on / off), and
// ends with a line of the bars (ratios measured in this one run).
//
// Prompts are random token ids (sent as token-id prompts, so their lengths are exact) with lengths uniform in
// [--input-len-min, --input-len-max], the same for a given seed and concurrency; every request asks for
// exactly --output-len tokens (ignore_eos).
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "bench_serve.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/tool_script.h"
#include "kernels/gemm.h"
#include "model/generate.h"
#include "model/zaya-init.h"
#include "model/zaya.h"
#include "serve/server.h"
#include "tokenizer/tokenizer.h"

namespace zaya::app {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The q-quantile with linear interpolation between order statistics (numpy's default, as vLLM reports).
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

// {"mean", "p50", "p99"} of seconds, in milliseconds.
json summary_ms(const std::vector<double>& s) {
  double sum = 0;
  for (double x : s) sum += x;
  const double mean = s.empty() ? 0 : sum / double(s.size());
  return {{"mean", mean * 1e3}, {"p50", quantile(s, 0.5) * 1e3}, {"p99", quantile(s, 0.99) * 1e3}};
}

std::vector<double> loadavg() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  f >> a >> b >> c;
  return {a, b, c};
}

std::vector<int64_t> parse_int_list(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string part = s.substr(pos, comma - pos);
    ZAYA_CHECK(!part.empty() && part.size() < 10 && part.find_first_not_of("0123456789") == std::string::npos,
               flag, " must be comma-separated positive integers, got '", s, "'");
    out.push_back(std::stoll(part));
    ZAYA_CHECK(out.back() > 0, flag, " must be positive, got '", s, "'");
    pos = comma + 1;
  }
  return out;
}

// A tokenizer for random-weight models: every id decodes to its own non-empty ASCII word (" w123"), so each
// generated token streams as one event (nothing is held back as a partial character or special token).
Tokenizer synthetic_tokenizer(int64_t vocab) {
  json v = json::object();
  for (int64_t i = 0; i < vocab; i++) v["w" + std::to_string(i)] = i;
  json doc = {{"model", {{"type", "BPE"}, {"vocab", v}, {"merges", json::array()}}}};
  return Tokenizer::from_json(doc.dump(), "synthetic-tokenizer.json");
}

// One request as the client saw it.
struct ReqResult {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0, output_tokens = 0;  // usage when the server sent it, else counted
  int64_t streamed_tokens = 0;                   // counted in the events
  int64_t events = 0, multi_token_events = 0;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;  // gaps between token events
};

struct Target {
  std::string base;  // scheme://host:port
  std::string api_key, model_name;
  std::string endpoint;  // completions | chat
  // The in-process server with the synthetic tokenizer: every token is one " w<id>" word, so a text chunk's
  // token count is its word count (the server merges the tokens of a sequence that arrived together).
  bool word_tokens = false;
};

int64_t count_words(const std::string& s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i++)
    if (s[i] != ' ' && (i == 0 || s[i - 1] == ' ')) n++;
  return n;
}

std::unique_ptr<httplib::Client> make_client(const Target& t) {
  auto c = std::make_unique<httplib::Client>(t.base);
  c->set_keep_alive(true);
  c->set_read_timeout(3600, 0);
  c->set_write_timeout(60, 0);
  c->set_connection_timeout(10, 0);
  c->set_tcp_nodelay(true);
  return c;
}

// Incremental Server-Sent Events parsing: whole events' data payloads as they complete.
struct SseParser {
  std::string buf, data;
  template <typename OnData>
  void feed(const char* p, size_t n, OnData on_data) {
    buf.append(p, n);
    size_t start = 0;
    for (;;) {
      const size_t nl = buf.find('\n', start);
      if (nl == std::string::npos) break;
      std::string line = buf.substr(start, nl - start);
      start = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {  // the end of an event
        if (!data.empty()) on_data(data);
        data.clear();
      } else if (line.rfind("data:", 0) == 0) {
        size_t k = 5;
        if (k < line.size() && line[k] == ' ') k++;
        if (!data.empty()) data += '\n';
        data += line.substr(k);
      }
    }
    buf.erase(0, start);
  }
};

// Sends one streamed request and times its events. Tokens per event: the log-probability entries when the
// event has them, else one when it carries text (a server that holds text back may merge tokens into one
// event: then `multi_token_events` stays 0 but the usage count exceeds the events; TPOT uses the usage).
ReqResult send_request(httplib::Client& cli, const Target& t, const std::string& body) {
  ReqResult r;
  httplib::Request req;
  req.method = "POST";
  req.path = t.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (!t.api_key.empty()) req.set_header("Authorization", "Bearer " + t.api_key);
  SseParser sse;
  std::string raw;  // the start of the body, for error messages
  bool done = false;
  int64_t counted = 0, usage_out = -1, usage_in = -1;
  double last = 0;
  const auto t0 = Clock::now();
  auto on_event = [&](const std::string& d) {
    const double now = seconds_since(t0);
    if (d == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(d, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    if (j.contains("error")) {
      r.error = j["error"].dump();
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      usage_out = j["usage"].value("completion_tokens", int64_t(-1));
      usage_in = j["usage"].value("prompt_tokens", int64_t(-1));
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& ch = j["choices"][0];
    int64_t n = 0;
    if (t.endpoint == "chat") {
      const json* lp = ch.contains("logprobs") && ch["logprobs"].is_object() ? &ch["logprobs"] : nullptr;
      if (lp && lp->contains("content") && (*lp)["content"].is_array()) {
        n = int64_t((*lp)["content"].size());
      } else if (ch.contains("delta") && ch["delta"].is_object()) {
        const json& dl = ch["delta"];
        for (const char* k : {"content", "reasoning_content"})
          if (dl.contains(k) && dl[k].is_string() && !dl[k].get<std::string>().empty()) n = 1;
        if (dl.contains("tool_calls")) n = 1;
      }
    } else {
      const json* lp = ch.contains("logprobs") && ch["logprobs"].is_object() ? &ch["logprobs"] : nullptr;
      if (lp && lp->contains("tokens") && (*lp)["tokens"].is_array())
        n = int64_t((*lp)["tokens"].size());
      else if (ch.contains("text") && ch["text"].is_string() && !ch["text"].get<std::string>().empty())
        n = t.word_tokens ? count_words(ch["text"].get<std::string>()) : 1;
    }
    if (n <= 0) return;
    if (counted == 0)
      r.ttft = now;
    else
      r.itl.push_back(now - last);
    last = now;
    counted += n;
    r.events++;
    if (n > 1) r.multi_token_events++;
  };
  req.content_receiver = [&](const char* p, size_t n, uint64_t, uint64_t) {
    if (raw.size() < 2000) raw.append(p, std::min(n, 2000 - raw.size()));
    sse.feed(p, n, on_event);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.e2e = seconds_since(t0);
  if (!sent) {
    r.error = "no response: " + httplib::to_string(err);
    return r;
  }
  if (res.status != 200) {
    r.error = "HTTP " + std::to_string(res.status) + ": " + raw.substr(0, 300);
    return r;
  }
  if (!r.error.empty()) return r;
  if (!done) {
    r.error = "the stream ended without [DONE]";
    return r;
  }
  if (counted == 0) {
    r.error = "no tokens streamed";
    return r;
  }
  r.streamed_tokens = counted;
  r.output_tokens = usage_out >= 0 ? usage_out : counted;
  r.prompt_tokens = usage_in >= 0 ? usage_in : 0;
  r.ok = true;
  return r;
}

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;  // chat: random words
};

// The prompts of one concurrency level: the same for a given (seed, concurrency, count).
std::vector<Prompt> make_prompts(const BenchServeOptions& o, int64_t vocab, int64_t c, int64_t count) {
  std::mt19937_64 rng(o.seed * 1000003ull + uint64_t(c) * 7919ull + 17);
  std::vector<Prompt> ps(static_cast<size_t>(count));
  for (auto& p : ps) {
    const int64_t len = o.input_len_min + int64_t(rng() % uint64_t(o.input_len_max - o.input_len_min + 1));
    p.ids.resize(size_t(len));
    for (auto& id : p.ids) id = int32_t(3 + rng() % uint64_t(vocab - 3));  // 0-2: pad, eos, bos
    if (!p.ids.empty()) p.ids[0] = 2;
    if (o.endpoint == "chat") {
      static const char* words[] = {"time",  "river", "light", "stone", "north", "paper", "green", "voice",
                                    "house", "field", "music", "water", "cloud", "glass", "story", "night"};
      for (int64_t i = 0; i < len; i++) p.text += std::string(i ? " " : "") + words[rng() % 16];
    }
  }
  return ps;
}

std::string request_body(const BenchServeOptions& o, const Target& t, const Prompt& p, int64_t max_tokens) {
  json b;
  if (!t.model_name.empty()) b["model"] = t.model_name;
  if (t.endpoint == "chat") {
    b["messages"] = json::array({{{"role", "user"}, {"content", p.text}}});
    if (o.logprobs) b["logprobs"] = true;
  } else {
    b["prompt"] = p.ids;
    if (o.logprobs) b["logprobs"] = 0;
  }
  b["max_tokens"] = max_tokens;
  b["ignore_eos"] = true;
  b["temperature"] = o.temperature;
  b["seed"] = o.seed;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  return b.dump();
}

// Prometheus samples without labels (name -> value) of a zaya server's /metrics; empty when unavailable.
std::map<std::string, double> scrape_metrics(const Target& t) {
  std::map<std::string, double> m;
  auto cli = make_client(t);
  cli->set_read_timeout(5, 0);
  auto r = cli->Get("/metrics");
  if (!r || r->status != 200) return m;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    try {
      m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    } catch (...) {
    }
  }
  return m;
}

// The in-process server and what the references need.
struct InProcess {
  ZayaModel model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<serve::Server> server;
};

// What `zaya bench forward` (B = 1, the prompt's length, every position's logits) and `zaya generate`
// (prefill, then `out_len` cached decode steps) measure on the same model, in the current GEMM mode.
struct Reference {
  int64_t forward_tokens = 0;
  double forward_s = 0;
  int64_t gen_prompt_tokens = 0, gen_decode_tokens = 0;
  double gen_prefill_s = 0, gen_decode_s = 0;
  void add(const Reference& r) {
    forward_tokens += r.forward_tokens;
    forward_s += r.forward_s;
    gen_prompt_tokens += r.gen_prompt_tokens;
    gen_decode_tokens += r.gen_decode_tokens;
    gen_prefill_s += r.gen_prefill_s;
    gen_decode_s += r.gen_decode_s;
  }
  double forward_tps() const { return forward_s > 0 ? double(forward_tokens) / forward_s : 0; }
  double gen_prefill_tps() const { return gen_prefill_s > 0 ? double(gen_prompt_tokens) / gen_prefill_s : 0; }
  double gen_decode_tps() const { return gen_decode_s > 0 ? double(gen_decode_tokens) / gen_decode_s : 0; }
  json to_json() const {
    return {{"forward_tokens_per_s", forward_tps()},
            {"forward_tokens", forward_tokens},
            {"generate_prefill_tokens_per_s", gen_prefill_tps()},
            {"generate_decode_tokens_per_s", gen_decode_tps()},
            {"generate_decode_tokens", gen_decode_tokens}};
  }
};

// Both on one prompt: the forward twice (the first a warm-up of this shape, as zaya bench forward runs one),
// then the generation.
Reference measure_reference(const ZayaModel& model, const Prompt& prompt, int64_t out_len,
                            const SamplerConfig& sampler) {
  Reference ref;
  ForwardScratch sc;
  ForwardResult res;
  ForwardOptions fo;  // all positions' logits, as zaya bench forward
  const auto& ids = prompt.ids;
  for (int r = 0; r < 2; r++) {
    ZayaCache cache(model.cfg, 1);
    const auto t0 = Clock::now();
    zaya_forward(model, cache, ids.data(), nullptr, 1, int64_t(ids.size()), fo, res, sc);
    if (r == 1) {
      ref.forward_s += seconds_since(t0);
      ref.forward_tokens += int64_t(ids.size());
    }
  }
  GenerateOptions go;
  go.max_new_tokens = out_len;
  go.sampler = sampler;
  go.stop_at_eos = false;
  GenerateStats st;
  generate(model, ids.data(), 1, int64_t(ids.size()), go, nullptr, nullptr, &st);
  ref.gen_prompt_tokens += st.prompt_tokens;
  ref.gen_prefill_s += st.prefill_s;
  // decode_s holds new_tokens - 1 forwards (the first token comes from the prefill), as TPOT does.
  ref.gen_decode_tokens += st.new_tokens - 1;
  ref.gen_decode_s += st.decode_s;
  return ref;
}

// Batched decode without the server (what `zaya bench decode` runs): B rows, each prefilled with 16 random
// tokens (untimed), advance `steps` tokens, with the router's choices recorded to count the distinct experts
// each step reads. The GEMM weights a step reads: everything but the experts (the head included) once, plus
// one expert's matrices per distinct expert per layer.
struct DecodeScaling {
  int64_t B = 0, steps = 0;
  double seconds = 0, distinct_experts = 0;  // distinct: per layer per step (mean)
  double weight_bytes_per_step = 0;
  json to_json() const {
    return {{"batch", B},
            {"tokens_per_s", seconds > 0 ? double(B * steps) / seconds : 0},
            {"step_ms", steps ? seconds / double(steps) * 1e3 : 0},
            {"distinct_experts_per_layer", distinct_experts},
            {"weight_mb_per_step", weight_bytes_per_step / 1e6},
            {"weight_mb_per_token", weight_bytes_per_step / 1e6 / double(std::max<int64_t>(B, 1))},
            {"weight_gb_per_s", seconds > 0 ? weight_bytes_per_step * double(steps) / seconds / 1e9 : 0}};
  }
};

DecodeScaling measure_decode(const ZayaModel& model, int64_t B, int64_t steps, uint64_t seed) {
  const ZayaConfig& c = model.cfg;
  std::mt19937 rng(uint32_t(seed) + 99);
  auto token = [&] { return int32_t(3 + rng() % uint32_t(c.vocab_size - 3)); };
  ZayaCache cache(c, B);
  ForwardScratch sc;
  ForwardResult res;
  ForwardOptions fo;
  fo.all_logits = false;
  std::vector<int32_t> ids(size_t(B * 16));
  for (auto& id : ids) id = token();
  zaya_forward(model, cache, ids.data(), nullptr, B, 16, fo, res, sc);
  fo.tap_router = true;
  DecodeScaling d;
  d.B = B;
  d.steps = steps;
  std::vector<int32_t> next(static_cast<size_t>(B));
  const int64_t L = c.num_hidden_layers, E = c.num_experts;
  double distinct = 0;
  for (int64_t s = 0; s < steps; s++) {
    for (auto& id : next) id = token();
    const auto t0 = Clock::now();
    zaya_forward(model, cache, next.data(), nullptr, B, 1, fo, res, sc);
    d.seconds += seconds_since(t0);
    for (int64_t l = 0; l < L; l++) {
      std::vector<bool> seen(size_t(E), false);
      for (int64_t b = 0; b < B; b++) {
        const int32_t e = res.choice[size_t(l * B + b)];
        if (e >= 0 && e < E) seen[size_t(e)] = true;
      }
      distinct += double(std::count(seen.begin(), seen.end(), true));
    }
  }
  d.distinct_experts = distinct / double(steps * L);
  const double elt = model.w.compute == DType::BF16 ? 2 : 4;
  const double expert = 3.0 * double(c.hidden_size) * double(c.moe_intermediate_size) * elt;
  const double others = (double(c.num_params()) - double(L * E) * expert / elt) * elt;
  d.weight_bytes_per_step = others + d.distinct_experts * double(L) * expert;
  return d;
}

// b - a for the engine's cumulative counters (the gauges are b's).
serve::EngineStats stats_delta(const serve::EngineStats& a, const serve::EngineStats& b) {
  serve::EngineStats d = b;
  d.steps -= a.steps;
  d.prompt_tokens -= a.prompt_tokens;
  d.prefill_tokens -= a.prefill_tokens;
  d.cached_tokens -= a.cached_tokens;
  d.generated_tokens -= a.generated_tokens;
  d.prefill_steps -= a.prefill_steps;
  d.decode_steps -= a.decode_steps;
  d.step_tokens -= a.step_tokens;
  d.step_seqs -= a.step_seqs;
  d.decode_step_seqs -= a.decode_step_seqs;
  d.prefill_step_s -= a.prefill_step_s;
  d.decode_step_s -= a.decode_step_s;
  d.forward_s -= a.forward_s;
  d.idle_s -= a.idle_s;
  return d;
}

void stats_add(serve::EngineStats& acc, const serve::EngineStats& d) {
  serve::EngineStats zero;
  serve::EngineStats neg = stats_delta(d, zero);  // -d
  acc = stats_delta(neg, acc);                    // acc - (-d)
}

double median(std::vector<double> v) {
  return quantile(std::move(v), 0.5);
}

class Bench {
 public:
  explicit Bench(const BenchServeOptions& o) : o_(o) {}
  int run();

 private:
  void start_in_process();
  void warm_up();
  json run_level(int64_t c, bool invariant, const std::vector<Prompt>& prompts);
  json level_json(int64_t c, bool invariant, const std::vector<Prompt>& prompts,
                  const std::vector<ReqResult>& results, double duration, const serve::EngineStats& es,
                  const std::map<std::string, double>& m0, const std::map<std::string, double>& m1,
                  double load0);
  struct C1;
  C1 run_c1_paired(const std::vector<Prompt>& prompts, bool refs, bool compare);
  void set_mode(bool invariant);
  void emit(const json& j);

  const BenchServeOptions& o_;
  Target target_;
  InProcess ip_;
  bool in_process_ = false;
  bool invariant_ = true;  // the main GEMM mode (in-process)
  int64_t vocab_ = 32000;
  std::string model_label_, run_id_;
  std::vector<json> lines_;
  std::unique_ptr<std::ofstream> out_;
  SamplerConfig sampler_;
};

void Bench::emit(const json& j) {
  const std::string s = j.dump();
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
  if (out_) {
    *out_ << s << "\n";
    out_->flush();
  }
  lines_.push_back(j);
}

void Bench::start_in_process() {
  const DType dt = o_.dtype == "bf16" ? DType::BF16 : DType::F32;
  std::string tok_path = o_.tokenizer;
  if (!o_.model_dir.empty()) {
    LoadOptions lo;
    lo.compute = dt;
    o_.semantics.apply(lo);
    ip_.model = ZayaModel::load(o_.model_dir, lo);
    if (tok_path.empty() && std::filesystem::exists(o_.model_dir + "/tokenizer.json"))
      tok_path = o_.model_dir + "/tokenizer.json";
    model_label_ = std::filesystem::path(o_.model_dir).lexically_normal().filename().string();
  } else {
    ip_.model.cfg = load_config(o_.config);
    apply_semantics(ip_.model.cfg, o_.semantics.get(), o_.config);
    ip_.model.w = init_weights(ip_.model.cfg, dt, o_.seed);
    model_label_ = std::filesystem::path(o_.config).filename().string();
  }
  vocab_ = ip_.model.cfg.vocab_size;
  if (!tok_path.empty()) {
    ip_.tok = std::make_unique<Tokenizer>(Tokenizer::load(tok_path));
  } else {
    ip_.tok = std::make_unique<Tokenizer>(synthetic_tokenizer(vocab_));
    target_.word_tokens = o_.endpoint == "completions";
    std::fprintf(stderr, "bench serve: no tokenizer given: a synthetic one (\"w<id>\" per token id)\n");
  }
  serve::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.model_name = "bench";
  const auto conc = parse_int_list(o_.concurrency, "--concurrency");
  const int64_t max_c = *std::max_element(conc.begin(), conc.end());
  so.engine.parallel = o_.parallel > 0 ? o_.parallel : max_c;
  so.engine.batch_tokens = std::max(o_.batch_tokens, so.engine.parallel);
  so.engine.ctx_size =
      o_.ctx_size > 0 ? o_.ctx_size : std::max<int64_t>(4096, o_.input_len_max + o_.output_len);
  so.engine.queue_size = 1 << 20;
  so.engine.cache_prompt = !o_.no_cache_prompt;
  so.http_threads = int(std::max<int64_t>(64, 2 * max_c + 4));
  ip_.server = std::make_unique<serve::Server>(so);
  ip_.server->start();
  ip_.server->attach(ip_.model, *ip_.tok);
  target_.base = "http://127.0.0.1:" + std::to_string(ip_.server->port());
  target_.model_name = so.model_name;
  std::fprintf(stderr,
               "bench serve: in-process server on %s: %s (%.3f B parameters, %s), %lld slots, %lld batch "
               "tokens, context %lld\n",
               target_.base.c_str(), model_label_.c_str(), ip_.model.cfg.num_params() / 1e9, o_.dtype.c_str(),
               (long long)so.engine.parallel, (long long)so.engine.batch_tokens,
               (long long)so.engine.ctx_size);
}

void Bench::set_mode(bool invariant) {
  if (in_process_) set_gemm_batch_invariant(invariant);  // the server is idle between levels
}

void Bench::warm_up() {
  auto cli = make_client(target_);
  Prompt p = make_prompts(o_, vocab_, 0, 1)[0];
  ReqResult r =
      send_request(*cli, target_, request_body(o_, target_, p, std::min<int64_t>(o_.output_len, 16)));
  ZAYA_CHECK(r.ok, "the warm-up request to ", target_.base, " failed: ", r.error);
}

json Bench::run_level(int64_t c, bool invariant, const std::vector<Prompt>& prompts) {
  const int64_t n = int64_t(prompts.size());
  std::vector<std::string> bodies;
  for (const auto& p : prompts) bodies.push_back(request_body(o_, target_, p, o_.output_len));
  std::vector<ReqResult> results(static_cast<size_t>(n));
  std::atomic<int64_t> next{0}, done{0};
  const serve::EngineStats es0 = in_process_ ? ip_.server->engine_stats() : serve::EngineStats{};
  const auto m0 = scrape_metrics(target_);
  const std::vector<double> load0 = loadavg();
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  std::vector<double> finished_at(static_cast<size_t>(n), 0.0);
  for (int64_t w = 0; w < c; w++)
    workers.emplace_back([&] {
      auto cli = make_client(target_);
      for (;;) {
        const int64_t i = next++;
        if (i >= n) break;
        results[size_t(i)] = send_request(*cli, target_, bodies[size_t(i)]);
        finished_at[size_t(i)] = seconds_since(t0);
        done++;
      }
    });
  const bool tty = isatty(2);
  auto last_print = Clock::now();
  while (done.load() < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (seconds_since(last_print) < (tty ? 0.5 : 10.0)) continue;
    last_print = Clock::now();
    const int64_t d = done.load();
    const double el = seconds_since(t0);
    const double eta = d > 0 ? el / double(d) * double(n - d) : 0;
    std::fprintf(stderr,
                 "%sbench serve: concurrency %lld (invariant %s): %lld/%lld requests, %.0f s, ETA %.0f s%s",
                 tty ? "\r" : "", (long long)c, invariant ? "on" : "off", (long long)d, (long long)n, el, eta,
                 tty ? "   " : "\n");
  }
  for (auto& w : workers) w.join();
  double duration = 0;
  for (double f : finished_at) duration = std::max(duration, f);
  if (tty) std::fprintf(stderr, "\n");
  const serve::EngineStats es1 = in_process_ ? ip_.server->engine_stats() : serve::EngineStats{};
  const auto m1 = scrape_metrics(target_);
  return level_json(c, invariant, prompts, results, duration, stats_delta(es0, es1), m0, m1, load0[0]);
}

json Bench::level_json(int64_t c, bool invariant, const std::vector<Prompt>& prompts,
                       const std::vector<ReqResult>& results, double duration, const serve::EngineStats& es,
                       const std::map<std::string, double>& m0, const std::map<std::string, double>& m1,
                       double load0) {
  const int64_t n = int64_t(prompts.size());
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t in_tok = 0, out_tok = 0, ok = 0, multi = 0, events = 0, streamed = 0;
  std::string first_error;
  for (int64_t i = 0; i < n; i++) {
    const ReqResult& r = results[size_t(i)];
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ok++;
    in_tok += r.prompt_tokens > 0 ? r.prompt_tokens : int64_t(prompts[size_t(i)].ids.size());
    out_tok += r.output_tokens;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / double(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    multi += r.multi_token_events;
    events += r.events;
    streamed += r.streamed_tokens;
  }
  json j;
  j["bench"] = "serve";
  j["omp_wait"] = omp_wait_summary();
  j["cpu"] = cpu_summary();  // this machine's (the client's; the server's too when in process)
  j["run_id"] = run_id_;
  j["model"] = model_label_;
  if (in_process_) j["dtype"] = o_.dtype;
  j["batch_invariant"] = in_process_ ? json(invariant) : json(nullptr);
  j["endpoint"] = o_.endpoint;
  j["concurrency"] = c;
  j["num_prompts"] = n;
  j["completed"] = ok;
  j["failed"] = n - ok;
  if (!first_error.empty()) j["first_error"] = first_error;
  j["duration_s"] = duration;
  j["requests_per_s"] = duration > 0 ? double(ok) / duration : 0;
  j["output_tokens_per_s"] = duration > 0 ? double(out_tok) / duration : 0;
  j["total_tokens_per_s"] = duration > 0 ? double(in_tok + out_tok) / duration : 0;
  j["input_tokens"] = in_tok;
  j["output_tokens"] = out_tok;
  j["ttft_ms"] = summary_ms(ttft);
  j["tpot_ms"] = summary_ms(tpot);
  j["itl_ms"] = summary_ms(itl);
  j["e2e_ms"] = summary_ms(e2e);
  const double tpot_mean = j["tpot_ms"]["mean"].get<double>();
  j["decode_tokens_per_s_per_request"] = tpot_mean > 0 ? 1e3 / tpot_mean : 0;
  // Streamed events with tokens, and those holding more than one (a sequence whose tokens reached the HTTP
  // thread together): ITL has one gap per event, as vLLM's benchmark counts it; TPOT uses the usage count.
  j["token_events"] = events;
  j["multi_token_events"] = multi;
  j["streamed_tokens"] = streamed;
  json srv = json::object();
  if (in_process_) {
    const double pre_s = es.prefill_step_s, dec_s = es.decode_step_s;
    const int64_t steps = es.steps, dsteps = es.decode_steps, pre_tok = es.prefill_tokens;
    srv["steps"] = steps;
    srv["prefill_steps"] = es.prefill_steps;
    srv["decode_steps"] = dsteps;
    srv["mean_step_tokens"] = steps ? double(es.step_tokens) / double(steps) : 0;
    srv["mean_step_seqs"] = steps ? double(es.step_seqs) / double(steps) : 0;
    srv["mean_decode_batch"] = dsteps ? double(es.decode_step_seqs) / double(dsteps) : 0;
    srv["prefill_tokens"] = pre_tok;
    srv["prefill_step_s"] = pre_s;
    srv["decode_step_s"] = dec_s;
    // Prompt tokens over the time of the steps that held prompt tokens (with decode tokens of other sequences
    // when the concurrency is above 1).
    srv["prefill_tokens_per_s"] = pre_s > 0 ? double(pre_tok) / pre_s : 0;
    srv["decode_tokens_per_s"] = dec_s > 0 ? double(es.decode_step_seqs) / dec_s : 0;  // decode-only steps
    srv["mean_decode_step_ms"] = dsteps ? dec_s / double(dsteps) * 1e3 : 0;
    srv["busy_fraction"] = duration > 0 ? (pre_s + dec_s) / duration : 0;
    srv["idle_s"] = es.idle_s;
    // Engine time outside the forward (batch assembly, sampling, log-probabilities, handing tokens over).
    const double fwd = es.forward_s;
    srv["outside_forward_fraction"] = pre_s + dec_s > 0 ? 1.0 - fwd / (pre_s + dec_s) : 0;
  } else if (!m0.empty() && !m1.empty()) {
    auto diff = [&](const char* k) { return m1.count(k) && m0.count(k) ? m1.at(k) - m0.at(k) : 0.0; };
    const double steps = diff("zaya_step_batch_tokens_count");
    srv["steps"] = steps;
    srv["mean_step_tokens"] = steps > 0 ? diff("zaya_step_batch_tokens_sum") / steps : 0;
    srv["mean_step_seqs"] = steps > 0 ? diff("zaya_step_batch_sequences_sum") / steps : 0;
  }
  j["server"] = srv;
  const std::vector<double> load1 = loadavg();
  j["loadavg_1m"] = {load0, load1[0]};
  std::fprintf(
      stderr,
      "bench serve: concurrency %lld: %.1f output tok/s, %.2f req/s, TTFT p50 %.0f ms, TPOT p50 %.1f "
      "ms, ITL p99 %.1f ms%s\n",
      (long long)c, j["output_tokens_per_s"].get<double>(), j["requests_per_s"].get<double>(),
      j["ttft_ms"]["p50"].get<double>(), j["tpot_ms"]["p50"].get<double>(), j["itl_ms"]["p99"].get<double>(),
      ok < n ? (" (" + std::to_string(n - ok) + " failed)").c_str() : "");
  return j;
}

// Concurrency 1 with the references paired in time (the shared machine drifts over seconds): for every
// prompt, the request through the server, then `zaya generate` and `zaya bench forward` on the same prompt
// in the same GEMM mode; with `compare`, the same again in the other mode (which mode goes first alternates).
// A mode's line counts only its requests' time (one request in flight: the sum of their latencies).
struct Bench::C1 {
  std::vector<bool> modes;                              // modes[0]: the main one
  std::vector<json> lines;                              // per mode
  std::vector<std::vector<ReqResult>> results;          // [mode][prompt]
  std::vector<std::vector<Reference>> refs;             // [mode][prompt] (empty without references)
  std::vector<std::vector<double>> engine_prefill_tps;  // [mode][prompt]: the request's prefill steps
  std::vector<Reference> ref_sum;                       // per mode
};

Bench::C1 Bench::run_c1_paired(const std::vector<Prompt>& prompts, bool refs, bool compare) {
  C1 r;
  r.modes = compare ? std::vector<bool>{invariant_, !invariant_} : std::vector<bool>{invariant_};
  const size_t M = r.modes.size(), n = prompts.size();
  r.results.assign(M, std::vector<ReqResult>(n));
  r.refs.assign(M, std::vector<Reference>(refs ? n : 0));
  r.engine_prefill_tps.assign(M, std::vector<double>(n, 0.0));
  r.ref_sum.assign(M, Reference{});
  std::vector<serve::EngineStats> es(M);
  std::vector<double> duration(M, 0.0);
  const auto m0 = scrape_metrics(target_);
  const double load0 = loadavg()[0];
  if (compare) {  // the other mode's first request pays its own first-call costs in a warm-up
    set_mode(!invariant_);
    warm_up();
    set_mode(invariant_);
  }
  auto cli = make_client(target_);
  const auto t0 = Clock::now();
  const bool tty = isatty(2);
  auto last_print = Clock::now();
  for (size_t i = 0; i < n; i++) {
    const std::string body = request_body(o_, target_, prompts[i], o_.output_len);
    for (size_t k = 0; k < M; k++) {
      const size_t m = i % 2 == 0 ? k : M - 1 - k;
      set_mode(r.modes[m]);  // the server is idle between requests
      auto reference = [&] {
        r.refs[m][i] = measure_reference(ip_.model, prompts[i], o_.output_len, sampler_);
        r.ref_sum[m].add(r.refs[m][i]);
      };
      if (refs && i % 2 == 1) reference();  // which of the pair goes first alternates too
      const serve::EngineStats a = ip_.server->engine_stats();
      r.results[m][i] = send_request(*cli, target_, body);
      const serve::EngineStats d = stats_delta(a, ip_.server->engine_stats());
      stats_add(es[m], d);
      duration[m] += r.results[m][i].e2e;
      r.engine_prefill_tps[m][i] = d.prefill_step_s > 0 ? double(d.prefill_tokens) / d.prefill_step_s : 0;
      if (refs && i % 2 == 0) reference();
    }
    if (seconds_since(last_print) >= (tty ? 0.5 : 10.0) || i + 1 == n) {
      last_print = Clock::now();
      const double el = seconds_since(t0);
      std::fprintf(stderr, "%sbench serve: concurrency 1%s: %zu/%zu prompts, %.0f s, ETA %.0f s%s",
                   tty ? "\r" : "", refs || compare ? " (paired with the references / the other mode)" : "",
                   i + 1, n, el, el / double(i + 1) * double(n - i - 1), tty ? "   " : "\n");
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  set_mode(invariant_);
  const auto m1 = scrape_metrics(target_);
  for (size_t m = 0; m < M; m++)
    r.lines.push_back(level_json(1, r.modes[m], prompts, r.results[m], duration[m], es[m], m0, m1, load0));
  return r;
}

int Bench::run() {
  const auto conc = parse_int_list(o_.concurrency, "--concurrency");
  ZAYA_CHECK(o_.input_len_min >= 1 && o_.input_len_max >= o_.input_len_min,
             "--input-len-min must be at least 1 and at most --input-len-max");
  ZAYA_CHECK(o_.output_len >= 1, "--output-len must be at least 1");
  ZAYA_CHECK(o_.num_prompts >= 0, "--num-prompts must be non-negative (0: max(8, 2 x concurrency))");
  ZAYA_CHECK(o_.endpoint == "completions" || o_.endpoint == "chat", "--endpoint is completions or chat");
  in_process_ = o_.url.empty();
  ZAYA_CHECK(!in_process_ || !o_.model_dir.empty() || !o_.config.empty(),
             "zaya bench serve needs --url URL (a running server), or --model DIR / --config FILE (a server "
             "in this process)");
  run_id_ = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  sampler_.greedy = o_.temperature <= 0;
  sampler_.temperature = float(o_.temperature);
  sampler_.seed = o_.seed;
  if (!o_.out.empty()) {
    out_ = std::make_unique<std::ofstream>(o_.out, std::ios::app);
    ZAYA_CHECK(out_->good(), o_.out, ": cannot open for appending");
  }
  std::signal(SIGPIPE, SIG_IGN);
  invariant_ = o_.batch_invariant == "on";
  if (in_process_) {
    set_gemm_batch_invariant(invariant_);
    start_in_process();
  } else {
    target_.base = o_.url;
    while (!target_.base.empty() && target_.base.back() == '/') target_.base.pop_back();
    if (target_.base.size() > 3 && target_.base.compare(target_.base.size() - 3, 3, "/v1") == 0)
      target_.base.resize(target_.base.size() - 3);
    if (target_.base.find("://") == std::string::npos) target_.base = "http://" + target_.base;
    vocab_ = o_.vocab_size > 0 ? o_.vocab_size : 32000;
    if (o_.vocab_size <= 0)
      std::fprintf(stderr,
                   "bench serve: prompt token ids in [3, 32000) (set --vocab-size for another range)\n");
    target_.model_name = o_.served_model_name;
    if (target_.model_name.empty()) {
      auto cli = make_client(target_);
      auto r = cli->Get("/v1/models");
      ZAYA_CHECK(r, o_.url, ": no answer (", httplib::to_string(r.error()), ")");
      json j = json::parse(r->body, nullptr, false);
      if (r->status == 200 && j.is_object() && j.contains("data") && j["data"].is_array() &&
          !j["data"].empty())
        target_.model_name = j["data"][0].value("id", "");
    }
    model_label_ = target_.model_name;
  }
  target_.api_key = o_.api_key;
  target_.endpoint = o_.endpoint;
  if (in_process_ && o_.vocab_size > 0) vocab_ = std::min(vocab_, o_.vocab_size);
  ZAYA_CHECK(vocab_ > 3, "--vocab-size must be above 3");

  auto count_for = [&](int64_t c) {
    return o_.num_prompts > 0 ? o_.num_prompts : std::max<int64_t>(8, 2 * c);
  };
  int64_t total = 0;
  for (int64_t c : conc) total += count_for(c);
  std::fprintf(stderr,
               "bench serve: %zu concurrency levels, %lld requests of %lld-%lld prompt tokens and %lld "
               "output tokens\n",
               conc.size(), (long long)total, (long long)o_.input_len_min, (long long)o_.input_len_max,
               (long long)o_.output_len);
  warm_up();

  const bool compare = in_process_ && o_.compare_invariant;
  const bool refs = in_process_ && o_.references;
  json by_c = json::object(), other_by_c = json::object();
  const bool has8 = std::find(conc.begin(), conc.end(), 8) != conc.end();
  std::vector<DecodeScaling> scaling;
  std::unique_ptr<C1> c1;
  for (int64_t c : conc) {
    const auto prompts = make_prompts(o_, vocab_, c, count_for(c));
    if (c == 1 && in_process_ && (refs || compare)) {
      c1 = std::make_unique<C1>(run_c1_paired(prompts, refs, compare));
      for (const json& j : c1->lines) emit(j);
      by_c["1"] = c1->lines[0];
      if (compare) other_by_c["1"] = c1->lines[1];
      if (refs && has8)
        for (int64_t B : {1, 8}) scaling.push_back(measure_decode(ip_.model, B, 16, o_.seed));
      continue;
    }
    json j = run_level(c, invariant_, prompts);
    emit(j);
    by_c[std::to_string(c)] = j;
    if (compare && c == 8) {
      set_mode(!invariant_);
      warm_up();
      json k = run_level(c, !invariant_, prompts);
      emit(k);
      other_by_c[std::to_string(c)] = k;
      set_mode(invariant_);
      warm_up();
    }
  }

  // The bars (issue 13), each a ratio of figures measured above in this run: per-prompt ratios of
  // neighbours in time where the figures are paired (concurrency 1), their median as the value.
  json bars;
  bars["bench"] = "serve_bars";
  bars["run_id"] = run_id_;
  bars["model"] = model_label_;
  if (in_process_) bars["dtype"] = o_.dtype;
  bars["batch_invariant"] = in_process_ ? json(invariant_) : json(nullptr);
  auto tps = [](const json& j) { return j["output_tokens_per_s"].get<double>(); };
  const bool have_ref = c1 && refs;
  // Mode index of the default GEMMs (what `zaya generate` and `zaya bench forward` run), -1 when not run.
  const int def = !c1 ? -1 : !invariant_ ? 0 : c1->modes.size() > 1 ? 1 : -1;
  auto pair_ratios = [&](auto num, auto den) {  // num(i) / den(i) per prompt
    std::vector<double> v;
    for (size_t i = 0; c1 && i < c1->results[0].size(); i++) {
      const double a = num(i), b = den(i);
      if (a > 0 && b > 0) v.push_back(a / b);
    }
    return v;
  };
  auto pair_ratio = [&](auto num, auto den) { return median(pair_ratios(num, den)); };
  auto rounded = [](const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(std::round(x * 1000) / 1000);
    return a;
  };
  auto server_decode = [&](size_t m) {  // 1 / TPOT of each request
    return [&, m](size_t i) {
      const ReqResult& q = c1->results[m][i];
      return q.ok && q.output_tokens > 1 && q.e2e > q.ttft ? double(q.output_tokens - 1) / (q.e2e - q.ttft)
                                                           : 0.0;
    };
  };
  if (by_c.contains("1") && by_c.contains("8")) {
    const double r = tps(by_c["8"]) / tps(by_c["1"]);
    json b = {{"value", r}, {"bar", 4.0}, {"pass", r >= 4.0}};
    if (scaling.size() == 2 && have_ref) {
      // What the model allows without any server: batched decode (B = 8 vs 1) and the weights each step
      // reads, and the c8/c1 ratio they predict when every request also prefills its prompt (the prompt
      // tokens at the reference prefill speed, the 8 prompts of a wave one after another).
      b["decode_b1"] = scaling[0].to_json();
      b["decode_b8"] = scaling[1].to_json();
      const double d1 = scaling[0].seconds / double(scaling[0].steps);
      const double d8 = scaling[1].seconds / double(scaling[1].steps);
      const json& l1 = by_c["1"];
      const double mean_prompt = double(l1["input_tokens"].get<int64_t>()) /
                                 double(std::max<int64_t>(1, l1["completed"].get<int64_t>()));
      const double pre = c1->ref_sum[0].gen_prefill_tps();
      const double p = pre > 0 ? mean_prompt / pre : 0;
      const double N = double(o_.output_len);
      b["decode_b8_over_b1_tokens_per_s"] = 8 * d1 / d8;
      b["predicted_from_references"] = 8 * (p + (N - 1) * d1) / (8 * p + (N - 1) * d8);
    }
    bars["c8_over_c1_output_tokens_per_s"] = b;
  }
  if (have_ref) {
    const auto& R = c1->refs;
    json b = {{"bar", 0.9}};
    b["server_c1"] = by_c["1"]["decode_tokens_per_s_per_request"];
    b["generate_same_gemm_mode"] = c1->ref_sum[0].gen_decode_tps();
    const auto per = pair_ratios(server_decode(0), [&](size_t i) { return R[0][i].gen_decode_tps(); });
    b["value"] = median(per);
    b["per_prompt"] = rounded(per);
    if (def >= 0) {
      b["generate_default_gemms"] = c1->ref_sum[def].gen_decode_tps();
      b["value_vs_default_gemms"] =
          pair_ratio(server_decode(0), [&](size_t i) { return R[def][i].gen_decode_tps(); });
    }
    if (def > 0)  // the server with --no-batch-invariant against zaya generate: both default GEMMs
      b["server_default_gemms_vs_generate"] =
          pair_ratio(server_decode(def), [&](size_t i) { return R[def][i].gen_decode_tps(); });
    b["pass"] = b["value"].get<double>() >= 0.9;
    bars["c1_decode_vs_generate"] = b;
    // Prefill: the engine's prompt tokens / time of the request's prefill steps, against zaya bench
    // forward's tokens/s on the same prompt (B = 1) as it runs by default (not batch-invariant).
    const int fm = def >= 0 ? def : 0;
    auto engine_pre = [&](size_t i) { return c1->engine_prefill_tps[0][i]; };
    json p = {{"bar", 0.8}};
    p["server_c1_engine"] = by_c["1"]["server"]["prefill_tokens_per_s"];
    const json& l1 = by_c["1"];
    p["server_c1_client_prompt_over_ttft"] =
        l1["ttft_ms"]["mean"].get<double>() > 0
            ? double(l1["input_tokens"].get<int64_t>()) /
                  double(std::max<int64_t>(1, l1["completed"].get<int64_t>())) /
                  (l1["ttft_ms"]["mean"].get<double>() / 1e3)
            : 0.0;
    p["bench_forward_default_gemms"] = c1->ref_sum[fm].forward_tps();
    p["bench_forward_same_gemm_mode"] = c1->ref_sum[0].forward_tps();
    p["generate_prefill_same_gemm_mode"] = c1->ref_sum[0].gen_prefill_tps();
    const auto per_p = pair_ratios(engine_pre, [&](size_t i) { return R[fm][i].forward_tps(); });
    p["value"] = median(per_p);
    p["per_prompt"] = rounded(per_p);
    p["value_vs_same_gemm_mode"] = pair_ratio(engine_pre, [&](size_t i) { return R[0][i].forward_tps(); });
    if (def > 0)
      p["server_default_gemms_vs_bench_forward"] =
          pair_ratio([&](size_t i) { return c1->engine_prefill_tps[def][i]; },
                     [&](size_t i) { return R[def][i].forward_tps(); });
    p["pass"] = p["value"].get<double>() >= 0.8;
    bars["c1_prefill_vs_bench_forward"] = p;
    bars["references"] = json::object();
    for (size_t m = 0; m < c1->modes.size(); m++)
      bars["references"][c1->modes[m] ? "invariant" : "default"] = c1->ref_sum[m].to_json();
  }
  if (!other_by_c.empty()) {
    json inv = json::object();
    const size_t on = invariant_ ? 0 : 1, off = 1 - on;
    if (c1 && c1->modes.size() == 2) {
      const auto& Q = c1->results;
      auto out_tps = [&](size_t m) {
        return [&, m](size_t i) { return Q[m][i].ok ? double(Q[m][i].output_tokens) / Q[m][i].e2e : 0.0; };
      };
      json k = {
          {"output_tokens_per_s_invariant_over_default", pair_ratio(out_tps(on), out_tps(off))},
          {"decode_tokens_per_s_invariant_over_default", pair_ratio(server_decode(on), server_decode(off))},
          {"ttft_invariant_over_default",
           pair_ratio([&](size_t i) { return Q[on][i].ttft; }, [&](size_t i) { return Q[off][i].ttft; })},
          {"engine_prefill_tokens_per_s_invariant_over_default",
           pair_ratio([&](size_t i) { return c1->engine_prefill_tps[on][i]; },
                      [&](size_t i) { return c1->engine_prefill_tps[off][i]; })}};
      if (have_ref) {
        const auto& R = c1->refs;
        k["bench_forward_invariant_over_default"] =
            pair_ratio([&](size_t i) { return R[on][i].forward_tps(); },
                       [&](size_t i) { return R[off][i].forward_tps(); });
        k["generate_decode_invariant_over_default"] =
            pair_ratio([&](size_t i) { return R[on][i].gen_decode_tps(); },
                       [&](size_t i) { return R[off][i].gen_decode_tps(); });
      }
      inv["c1_paired"] = k;
    }
    if (other_by_c.contains("8")) {
      const json& a = invariant_ ? by_c["8"] : other_by_c["8"];
      const json& b = invariant_ ? other_by_c["8"] : by_c["8"];
      inv["c8"] = {{"output_tokens_per_s_invariant_over_default", tps(a) / tps(b)},
                   {"tpot_p50_invariant_over_default",
                    a["tpot_ms"]["p50"].get<double>() / std::max(1e-9, b["tpot_ms"]["p50"].get<double>())},
                   {"ttft_p50_invariant_over_default",
                    a["ttft_ms"]["p50"].get<double>() / std::max(1e-9, b["ttft_ms"]["p50"].get<double>())},
                   {"engine_prefill_tokens_per_s_invariant_over_default",
                    a["server"]["prefill_tokens_per_s"].get<double>() /
                        std::max(1e-9, b["server"]["prefill_tokens_per_s"].get<double>())}};
    }
    bars["batch_invariance_cost"] = inv;
  }
  bars["loadavg"] = loadavg();
  if (bars.contains("c8_over_c1_output_tokens_per_s") || bars.contains("c1_decode_vs_generate") ||
      bars.contains("batch_invariance_cost"))
    emit(bars);

  if (!o_.plot.empty()) {
    const std::string script = zaya::find_tool_script("plot_bench_serve.py");
    const std::string tmp =
        (std::filesystem::temp_directory_path() / ("zaya_bench_serve_" + std::to_string(getpid()) + ".jsonl"))
            .string();
    {
      std::ofstream f(tmp);
      for (const json& j : lines_) f << j.dump() << "\n";
    }
    const std::string later = o_.out.empty() ? "(run again with --out FILE.jsonl to keep the lines)" : o_.out;
    if (script.empty()) {
      std::fprintf(stderr,
                   "bench serve: no plot: tools/plot_bench_serve.py is neither beside this binary nor in "
                   "../tools from it\n");
    } else if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
      std::fprintf(stderr,
                   "bench serve: no plot (it needs /usr/bin/python3 with matplotlib: apt-get install "
                   "python3-matplotlib); later: /usr/bin/python3 %s %s %s\n",
                   script.c_str(), later.c_str(), o_.plot.c_str());
    } else {
      const std::string cmd = "/usr/bin/python3 " + zaya::shell_quote(script) + " " + zaya::shell_quote(tmp) +
                              " " + zaya::shell_quote(o_.plot);
      if (std::system(cmd.c_str()) == 0)
        std::fprintf(stderr, "bench serve: plot written to %s\n", o_.plot.c_str());
      else
        std::fprintf(stderr, "bench serve: no plot: %s failed (see above)\n", script.c_str());
    }
    std::filesystem::remove(tmp);
  }
  if (in_process_) {
    set_gemm_batch_invariant(false);
    ip_.server->stop();
  }
  int64_t failed = 0;
  for (const json& j : lines_)
    if (j.contains("failed")) failed += j["failed"].get<int64_t>();
  if (failed > 0) std::fprintf(stderr, "bench serve: %lld requests failed\n", (long long)failed);
  return failed > 0 ? 1 : 0;
}

}  // namespace

void add_bench_serve_options(CLI::App& s, BenchServeOptions& o) {
  auto* url =
      s.add_option("--url", o.url,
                   "a running OpenAI-compatible server (http://HOST:PORT); without it a server starts in "
                   "this process over --model or --config");
  auto* m =
      s.add_option("--model", o.model_dir, "HF checkpoint directory (in-process server)")->excludes(url);
  s.add_option("--config", o.config, "model config.json with random weights (in-process server)")
      ->excludes(m)
      ->excludes(url);
  s.add_option("--tokenizer", o.tokenizer,
               "tokenizer.json (default: MODEL/tokenizer.json, else a synthetic one-word-per-id tokenizer)");
  s.add_option("--dtype", o.dtype, "GEMM dtype of the in-process server")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  add_load_flags(s, o.semantics);
  s.add_option("--parallel", o.parallel, "server slots (0: the largest concurrency)")->capture_default_str();
  s.add_option("--batch-tokens", o.batch_tokens, "tokens per engine step (zaya serve --batch-tokens)")
      ->capture_default_str();
  s.add_option("--ctx-size", o.ctx_size, "context per sequence (0: max(4096, input-len-max + output-len))")
      ->capture_default_str();
  s.add_option("--batch-invariant", o.batch_invariant,
               "the server's GEMM mode: on (zaya serve's default) or off (--no-batch-invariant)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  s.add_flag("!--no-compare-invariant", o.compare_invariant,
             "skip the reruns of concurrency 1 and 8 with the other GEMM mode");
  s.add_flag("!--no-references", o.references,
             "skip the zaya generate / bench forward reference runs (and the bars that need them)");
  s.add_flag("--no-cache-prompt", o.no_cache_prompt, "the server's prompt-state cache off");
  s.add_option("--concurrency", o.concurrency, "comma-separated requests in flight")->capture_default_str();
  s.add_option("--num-prompts", o.num_prompts, "requests per concurrency (0: max(8, 2 x concurrency))")
      ->capture_default_str();
  s.add_option("--input-len-min", o.input_len_min, "shortest prompt (tokens)")->capture_default_str();
  s.add_option("--input-len-max", o.input_len_max, "longest prompt (tokens)")->capture_default_str();
  s.add_option("--output-len", o.output_len, "tokens generated per request (ignore_eos)")
      ->capture_default_str();
  s.add_option("--vocab-size", o.vocab_size,
               "prompt token ids are drawn from [3, N) (default: the model's, or 32000 with --url)");
  s.add_option("--endpoint", o.endpoint, "completions (token-id prompts) or chat (text prompts)")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  s.add_option("--served-model-name", o.served_model_name,
               "the model to request (--url: default /v1/models' first)");
  s.add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
  s.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  s.add_flag("--logprobs", o.logprobs,
             "ask for the chosen tokens' log-probabilities: exact token counts per streamed event");
  s.add_option("--seed", o.seed, "prompts, weights and sampling seed")->capture_default_str();
  s.add_option("--out", o.out, "append the JSON lines to this file");
  s.add_option("--plot", o.plot, "draw output tokens/s, TTFT and TPOT against concurrency (PNG)");
}

int bench_serve(const BenchServeOptions& o) {
  Bench b(o);
  return b.run();
}

}  // namespace zaya::app
