#include "serve/server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"
#include "serve/chat_output.h"
#include "serve/jinja.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace zaya::serve {

// JSON answers say their charset: cpp-httplib (Debian's, built with zlib and brotli) gzips a response whose
// type is exactly "application/json" when the client accepts it, and its gzipped chunked answers end in a way
// node-fetch on Node 18 (the OpenAI JS client there) reports as "Premature close". Answers are small and
// latency matters more: no compression, as vLLM and llama.cpp's server.
constexpr const char* kJsonType = "application/json; charset=utf-8";

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(), kJsonType);
}

void send_error(httplib::Response& res, const RequestError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status, e.to_json());
}

// Text released by a sequence, cut at the first stop string. Holds back a tail that may still become one.
struct StopMatcher {
  std::vector<std::string> stops;
  std::string text;     // everything decoded, cut at a stop string once one is found
  size_t released = 0;  // bytes of `text` handed out
  bool stopped = false;

  // Adds decoded text; returns the newly releasable text.
  std::string feed(const std::string& piece) {
    if (stopped) return "";
    text += piece;
    size_t max_len = 0;
    for (const std::string& s : stops) max_len = std::max(max_len, s.size());
    const size_t from = released > max_len ? released - max_len : 0;
    size_t cut = std::string::npos;
    for (const std::string& s : stops) {
      if (s.empty()) continue;
      size_t p = text.find(s, from);
      if (p != std::string::npos) cut = std::min(cut, p);
    }
    if (cut != std::string::npos) {
      text.resize(std::max(cut, released));
      stopped = true;
      return take(text.size());
    }
    // Hold back the longest suffix that is a proper prefix of a stop string.
    size_t hold = 0;
    for (const std::string& s : stops)
      for (size_t k = std::min(s.size() - 1, text.size() - released); k > hold; k--)
        if (text.compare(text.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    return take(text.size() - hold);
  }
  std::string finish() { return take(text.size()); }

 private:
  std::string take(size_t end) {
    std::string out = text.substr(released, end - released);
    released = end;
    return out;
  }
};

}  // namespace

const char* builtin_zaya1_chat_template();

struct Server::Impl {
  ServerOptions opt;
  httplib::Server http;
  std::atomic<bool> ready{false};
  const ZayaModel* model = nullptr;
  const Tokenizer* tok = nullptr;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<jinja::Template> chat_template;
  int64_t created = unix_now();
  std::vector<int32_t> eos_ids;  // the config's end-of-sequence ids
  int32_t im_end_id = -1;        // <|im_end|> when the tokenizer has it as one token
  std::string bos_text, eos_text;

  Metrics metrics;
  std::mutex stats_mu;
  EngineStats last_stats;  // what the token counters already hold
  Counter* requests = nullptr;
  Counter* prompt_tokens = nullptr;
  Counter* cached_tokens = nullptr;
  Counter* generation_tokens = nullptr;
  Gauge* running = nullptr;
  Gauge* waiting = nullptr;
  Histogram* step_tokens = nullptr;
  Histogram* step_seqs = nullptr;
  Histogram* ttft = nullptr;
  Histogram* itl = nullptr;

  Impl() {
    requests = &metrics.counter("zaya_requests_total", "HTTP requests by status code.", "status");
    prompt_tokens = &metrics.counter("zaya_prompt_tokens_total", "Prompt tokens of admitted sequences.");
    cached_tokens = &metrics.counter("zaya_prompt_tokens_cached_total",
                                     "Prompt tokens whose state came from the prompt cache.");
    generation_tokens = &metrics.counter("zaya_generation_tokens_total", "Generated tokens.");
    running = &metrics.gauge("zaya_running_sequences", "Sequences in the engine's batch.");
    waiting = &metrics.gauge("zaya_waiting_sequences", "Sequences queued for a slot.");
    step_tokens = &metrics.histogram("zaya_step_batch_tokens", "Tokens per engine step.",
                                     {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048});
    step_seqs = &metrics.histogram("zaya_step_batch_sequences", "Sequences per engine step.",
                                   {1, 2, 4, 8, 16, 32, 64});
    ttft = &metrics.histogram("zaya_time_to_first_token_seconds", "Time from request to first token.",
                              {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
    itl = &metrics.histogram("zaya_inter_token_latency_seconds", "Time between tokens of a sequence.",
                             {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  }

  void routes();
  void check_model(const std::string& name) const {
    if (!name.empty() && name != opt.model_name)
      throw RequestError(
          404, "The model '" + name + "' does not exist; this server serves '" + opt.model_name + "'",
          "model", "invalid_request_error", "model_not_found");
  }
  void require_ready() const {
    if (!ready) throw RequestError(503, "the model is still loading", "", "server_error", "loading");
  }
  void handle_completions(const httplib::Request& req, httplib::Response& res);
  void handle_chat(const httplib::Request& req, httplib::Response& res);
  std::string render_chat(const ChatRequest& r) const;
  // A checkpoint's vocabulary may be larger than its tokenizer's (padded embeddings): ids the tokenizer does
  // not know decode to nothing rather than fail.
  std::string token_text(int32_t id) const { return id < tok->vocab_size() ? tok->decode({id}, false) : ""; }
  // A token as the logprobs show it: its text, or "token_id:N" with `return_tokens_as_token_ids` (vLLM's
  // flag: exact ids for clients that compare tokens, and no ambiguity for partial UTF-8).
  std::string token_shown(int32_t id, bool as_id) const {
    return as_id ? "token_id:" + std::to_string(id) : token_text(id);
  }
  std::string ids_text(const std::vector<int32_t>& ids) const {
    std::vector<int32_t> known;
    for (int32_t id : ids)
      if (id < tok->vocab_size()) known.push_back(id);
    return tok->decode(known, false);
  }
};

namespace {

// One choice being generated: its engine sequence, incremental detokenization, stop strings, timing.
struct ChoiceRun {
  std::shared_ptr<SeqHandle> h;
  std::unique_ptr<StreamDecoder> dec;
  StopMatcher stop;
  std::vector<int32_t> stop_ids;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> tops;
  std::string finish;  // set when done
  bool done = false;
  int64_t n_prompt = 0;
  double t_last = 0;
};

// Waits for the choices' events (up to ~`timeout_ms`), decodes them and hands new text per choice to
// `on_text(choice, text, new_token_indices_begin)`. Returns when every choice is done.
template <typename OnText>
void pump(Server::Impl& s, std::vector<ChoiceRun>& runs, int timeout_ms, OnText on_text) {
  std::vector<SeqEvent> ev;
  for (size_t i = 0; i < runs.size(); i++) {
    ChoiceRun& r = runs[i];
    if (r.done) continue;
    ev.clear();
    if (!r.h->wait(ev, runs.size() == 1 ? timeout_ms : std::max(1, timeout_ms / int(runs.size())))) continue;
    const size_t first_new = r.tokens.size();
    std::string text;
    for (const SeqEvent& e : ev) {
      if (e.kind == SeqEvent::Kind::Done) {
        r.done = true;
        if (r.finish.empty()) r.finish = e.finish_reason == "abort" ? "stop" : e.finish_reason;
        break;
      }
      if (r.stop.stopped) continue;  // tokens after a stop string (the sequence is being cancelled)
      if (r.tokens.empty())
        s.ttft->observe(e.t);
      else
        s.itl->observe(e.t - r.t_last);
      r.t_last = e.t;
      r.tokens.push_back(e.token);
      r.logprobs.push_back(e.logprob);
      r.tops.push_back(e.top);
      if (std::find(r.stop_ids.begin(), r.stop_ids.end(), e.token) != r.stop_ids.end()) continue;
      if (e.token < s.tok->vocab_size()) text += r.stop.feed(r.dec->push(e.token));
      if (r.stop.stopped) {
        r.finish = "stop";
        r.h->cancel();
      }
    }
    if (r.done && !r.stop.stopped) text += r.stop.feed(r.dec->flush()) + r.stop.finish();
    on_text(i, text, first_new);
  }
}

void cancel_all(std::vector<ChoiceRun>& runs) {
  for (ChoiceRun& r : runs)
    if (!r.done) r.h->cancel();
}

bool any_running(const std::vector<ChoiceRun>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ChoiceRun& c) { return !c.done; });
}

// The connection of a request, found by its addresses: httplib 0.11 shows a handler neither its socket nor
// whether the client is still there. The worker thread owns the socket until the handler returns, so the
// fd found once stays valid; polling it for the peer's hang-up tells a client that went away.
class PeerProbe {
 public:
  explicit PeerProbe(const httplib::Request& req) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return;
    while (dirent* e = readdir(d)) {
      const int fd = std::atoi(e->d_name);
      if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d)) continue;
      if (matches(fd, req)) {
        fd_ = fd;
        break;
      }
    }
    closedir(d);
  }
  // True once the client closed its side (or the socket failed); false while it is there or when the
  // socket was not found.
  bool gone() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  static bool address_is(const sockaddr_storage& a, const std::string& host, int port) {
    char buf[INET6_ADDRSTRLEN] = {};
    int p = -1;
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
      p = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &in->sin6_addr, buf, sizeof buf);
      p = ntohs(in->sin6_port);
    } else {
      return false;
    }
    return p == port && host == buf;
  }
  static bool matches(int fd, const httplib::Request& req) {
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return false;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0) return false;
    return address_is(peer, req.remote_addr, req.remote_port) &&
           address_is(self, req.local_addr, req.local_port);
  }
  int fd_ = -1;
};

// A non-streamed answer: runs every choice to its end, handing new text to `on_text` as pump() does, and
// cancels them when the client goes away (false then). The answer goes out whole, with a Content-Length:
// a chunked JSON body trips node-fetch 2 (the OpenAI JS client 4.x) on Node 18 with "Premature close"
// when the connection is kept alive.
template <typename OnText>
bool run_to_end(Server::Impl& s, std::vector<ChoiceRun>& runs, const PeerProbe& peer, OnText on_text) {
  try {
    while (any_running(runs)) {
      pump(s, runs, 100, on_text);
      if (peer.gone()) {
        cancel_all(runs);
        return false;
      }
    }
  } catch (...) {
    cancel_all(runs);
    throw;
  }
  return true;
}

// A streamed answer: runs every choice to its end; `on_text(i, text, first_new)` writes events and returns
// false when a write failed. An SSE comment goes out after a second without events (it finds a client that
// went away). False, with the choices cancelled, when the client went away.
template <typename OnText>
bool stream_to_end(Server::Impl& s, std::vector<ChoiceRun>& runs, httplib::DataSink& sink, OnText on_text) {
  auto last_write = Clock::now();
  bool ok = true;
  while (ok && any_running(runs)) {
    pump(s, runs, 100, [&](size_t i, const std::string& text, size_t first_new) {
      if (!ok) return;
      bool wrote = false;
      ok = on_text(i, text, first_new, &wrote);
      if (wrote) last_write = Clock::now();
    });
    if (ok && Clock::now() - last_write > std::chrono::seconds(1)) {
      const char* ping = ": keep-alive\n\n";
      ok = sink.write(ping, std::strlen(ping));
      last_write = Clock::now();
    }
  }
  if (!ok) cancel_all(runs);
  return ok;
}

// A response body writer that cannot take the server down: an exception ends the response and frees the
// request's sequences.
template <typename F>
auto safe_provider(std::shared_ptr<std::vector<ChoiceRun>> runs, F f) {
  return [runs, f](size_t offset, httplib::DataSink& sink) {
    try {
      return f(offset, sink);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zaya serve: a response failed: %s\n", e.what());
      cancel_all(*runs);
      return false;
    }
  };
}

}  // namespace

std::string Server::Impl::render_chat(const ChatRequest& r) const {
  json messages = json::array();
  for (const ChatMessage& m : r.messages) {
    json j = m.raw;
    j["role"] = m.role;
    if (m.content_null)
      j["content"] = nullptr;
    else
      j["content"] = m.content;
    if (!m.tool_calls.empty()) {
      json calls = json::array();
      for (const auto& tc : m.tool_calls) {
        json args = json::parse(tc.arguments, nullptr, false);
        if (args.is_discarded()) args = tc.arguments;
        calls.push_back(
            {{"id", tc.id}, {"type", "function"}, {"function", {{"name", tc.name}, {"arguments", args}}}});
      }
      j["tool_calls"] = calls;
    }
    messages.push_back(j);
  }
  json ctx = r.chat_template_kwargs.is_object() ? r.chat_template_kwargs : json::object();
  ctx["messages"] = messages;
  if (!r.tools.empty() && r.tool_choice != "none") ctx["tools"] = r.tools;
  ctx["add_generation_prompt"] = r.add_generation_prompt;
  ctx["enable_thinking"] = r.enable_thinking;
  ctx["bos_token"] = bos_text;
  ctx["eos_token"] = eos_text;
  try {
    return chat_template->render(ctx);
  } catch (const Error& e) {
    throw RequestError(400, std::string("the chat template failed on these messages: ") + e.what(),
                       "messages");
  }
}

namespace {

SamplerConfig sampler_config(const SamplingParams& p, int choice) {
  SamplerConfig c;
  c.greedy = p.temperature <= 0;
  c.temperature = float(p.temperature);
  c.top_k = p.top_k > 0 ? p.top_k : 0;
  c.top_p = float(p.top_p);
  c.min_p = float(p.min_p);
  c.presence_penalty = float(p.presence_penalty);
  c.frequency_penalty = float(p.frequency_penalty);
  c.repetition_penalty = float(p.repetition_penalty);
  for (const auto& [id, b] : p.logit_bias) c.logit_bias.push_back({id, float(b)});
  c.seed = p.seed ? *p.seed + uint64_t(choice) : std::random_device{}() * 0x9E3779B97F4A7C15ull + choice;
  return c;
}

}  // namespace

// Submits n sequences for one prompt; a full queue cancels what was submitted and answers 503.
static std::vector<ChoiceRun> submit_choices(Server::Impl& s, const std::vector<int32_t>& prompt,
                                             const SamplingParams& p, bool prompt_logprobs, bool chat,
                                             int first_index) {
  const int64_t ctx = s.opt.engine.ctx_size;
  if (int64_t(prompt.size()) >= ctx)
    throw RequestError(400,
                       "This model's maximum context length is " + std::to_string(ctx) +
                           " tokens; the prompt has " + std::to_string(prompt.size()) +
                           " tokens (prompt and output must fit: raise --ctx-size)",
                       chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
  std::vector<ChoiceRun> runs(p.n);
  for (int i = 0; i < p.n; i++) {
    ChoiceRun& r = runs[i];
    SeqRequest q;
    q.prompt = prompt;
    q.sampler = sampler_config(p, first_index + i);
    q.max_tokens = p.max_tokens;
    if (!p.ignore_eos) {
      q.stop_ids = s.eos_ids;
      if (chat && s.im_end_id >= 0) q.stop_ids.push_back(s.im_end_id);
    }
    for (int32_t id : p.stop_token_ids) q.stop_ids.push_back(id);
    q.top_logprobs = p.logprobs ? p.top_logprobs : -1;
    q.prompt_logprobs = prompt_logprobs;
    r.stop_ids = q.stop_ids;
    r.stop.stops = p.stop;
    if (chat && s.im_end_id < 0 && !p.ignore_eos) r.stop.stops.push_back("<|im_end|>");
    r.dec = std::make_unique<StreamDecoder>(*s.tok, /*skip_special_tokens=*/!chat);
    r.n_prompt = int64_t(prompt.size());
    try {
      r.h = s.engine->submit(std::move(q));
    } catch (const QueueFull& e) {
      for (int j = 0; j < i; j++) runs[j].h->cancel();
      throw RequestError(503, std::string(e.what()) + "; retry later", "", "server_error", "queue_full");
    } catch (const Error& e) {
      for (int j = 0; j < i; j++) runs[j].h->cancel();
      throw RequestError(400, e.what(), chat ? "messages" : "prompt");
    }
  }
  return runs;
}

void Server::Impl::handle_completions(const httplib::Request& hreq, httplib::Response& res) {
  require_ready();
  auto r = std::make_shared<CompletionRequest>(parse_completion_request(hreq.body));
  check_model(r->model);
  const std::string id = random_id("cmpl-");
  const int64_t created = unix_now();
  // Every prompt's choices, prompt after prompt (choice index = prompt * n + i, as OpenAI numbers them).
  auto runs = std::make_shared<std::vector<ChoiceRun>>();
  auto prompts = std::make_shared<std::vector<std::vector<int32_t>>>();
  auto prompt_text = std::make_shared<std::vector<std::string>>();
  const bool score_prompt = r->echo && r->sampling.logprobs;
  try {
    for (const auto& p : r->prompts) {
      std::vector<int32_t> ids = p.is_ids ? p.ids : tok->encode(p.text, true);
      if (ids.empty()) throw RequestError(400, "the prompt encodes to no tokens", "prompt");
      for (int32_t t : ids)
        if (t < 0 || t >= model->cfg.vocab_size)
          throw RequestError(400,
                             "prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                 std::to_string(model->cfg.vocab_size) + ")",
                             "prompt");
      auto part = submit_choices(*this, ids, r->sampling, score_prompt, false, int(runs->size()));
      for (auto& c : part) runs->push_back(std::move(c));
      prompts->push_back(ids);
      prompt_text->push_back(p.is_ids ? ids_text(ids) : p.text);
    }
  } catch (...) {
    cancel_all(*runs);
    throw;
  }
  const int n = r->sampling.n;
  auto usage = [this, runs, prompts, n]() {
    Usage u;
    for (size_t i = 0; i < runs->size(); i++) {
      if (i % n == 0) u.prompt_tokens += int64_t((*prompts)[i / n].size());
      u.completion_tokens += int64_t((*runs)[i].tokens.size());
      if (i % n == 0) u.cached_tokens += (*runs)[i].h->cached_tokens();
    }
    return u;
  };
  // The logprobs object of one choice: echoed prompt tokens first (when asked), then the generated ones.
  auto logprobs_of = [this, r, prompts, prompt_text, n](size_t i, ChoiceRun& c, size_t from, size_t offset0,
                                                        bool with_prompt) {
    CompletionChoice::Logprobs lp;
    int64_t offset = int64_t(offset0);
    auto add = [&](int32_t tid, std::optional<float> l, const std::vector<TokenLogprob>& top) {
      const bool as_id = r->sampling.return_tokens_as_token_ids;
      std::string t = token_text(tid);
      lp.tokens.push_back(token_shown(tid, as_id));
      lp.token_logprobs.push_back(l);
      std::vector<std::pair<std::string, float>> alts;
      for (const auto& a : top) alts.push_back({token_shown(a.id, as_id), a.logprob});
      lp.top_logprobs.push_back(alts);
      lp.text_offset.push_back(offset);
      offset += int64_t(t.size());
    };
    if (with_prompt) {
      const auto& ids = (*prompts)[i / n];
      for (size_t k = 0; k < ids.size(); k++)
        add(ids[k], k == 0 ? std::nullopt : std::optional<float>(c.h->prompt_logprobs[k]),
            k == 0 ? std::vector<TokenLogprob>{} : c.h->prompt_top[k]);
    }
    for (size_t k = from; k < c.tokens.size(); k++) add(c.tokens[k], c.logprobs[k], c.tops[k]);
    return lp;
  };

  if (!r->stream.stream) {
    if (!run_to_end(*this, *runs, PeerProbe(hreq), [](size_t, const std::string&, size_t) {})) return;
    std::vector<CompletionChoice> choices;
    for (size_t i = 0; i < runs->size(); i++) {
      ChoiceRun& c = (*runs)[i];
      CompletionChoice ch;
      ch.index = int(i);
      ch.text = (r->echo ? (*prompt_text)[i / n] : "") + c.stop.text;
      ch.finish_reason = c.finish;
      if (r->sampling.logprobs) ch.logprobs = logprobs_of(i, c, 0, 0, r->echo);
      choices.push_back(ch);
    }
    Usage u = usage();
    generation_tokens->add(double(u.completion_tokens));
    res.set_content(completion_json(id, created, opt.model_name, choices, &u).dump(), kJsonType);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  // One stream per connection: node-fetch 2 (the OpenAI JS client 4.x) on Node 18 fails a chunked response
  // on a kept-alive connection with "Premature close" once the client has stopped reading at [DONE].
  res.set_header("Connection", "close");
  res.set_chunked_content_provider(
      "text/event-stream", safe_provider(runs, [=, this](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        std::vector<size_t> text_bytes(runs->size(), 0);
        // Echo: the prompt goes out as each choice's first chunk once the choice has its first event, i.e.
        // after its prefill, which is what scores the prompt tokens (prompt log-probabilities).
        std::vector<bool> echoed(runs->size(), !r->echo);
        auto echo = [&](size_t i) {
          echoed[i] = true;
          CompletionChoice ch;
          ch.index = int(i);
          ch.text = (*prompt_text)[i / n];
          ChoiceRun& c = (*runs)[i];
          if (r->sampling.logprobs) ch.logprobs = logprobs_of(i, c, c.tokens.size(), 0, true);
          text_bytes[i] = ch.text.size();
          return write(sse_event(
              completion_json(id, created, opt.model_name, {ch}, nullptr, r->stream.include_usage)));
        };
        auto on_text = [&](size_t i, const std::string& text, size_t first_new, bool* wrote) {
          ChoiceRun& c = (*runs)[i];
          if (!echoed[i]) {
            *wrote = true;
            if (!echo(i)) return false;
          }
          const bool lp = r->sampling.logprobs && first_new < c.tokens.size();
          if (text.empty() && !c.done && !lp) return true;  // text held back (a stop string may begin)
          CompletionChoice ch;
          ch.index = int(i);
          ch.text = text;
          if (r->sampling.logprobs) ch.logprobs = logprobs_of(i, c, first_new, text_bytes[i], false);
          text_bytes[i] += text.size();
          if (c.done) ch.finish_reason = c.finish;
          *wrote = true;
          return write(sse_event(
              completion_json(id, created, opt.model_name, {ch}, nullptr, r->stream.include_usage)));
        };
        if (!stream_to_end(*this, *runs, sink, on_text)) return false;
        Usage u = usage();
        generation_tokens->add(double(u.completion_tokens));
        if (r->stream.include_usage) {
          json j = completion_json(id, created, opt.model_name, {}, &u);
          write(sse_event(j));
        }
        write(sse_done());
        sink.done();
        return true;
      }));
}

void Server::Impl::handle_chat(const httplib::Request& hreq, httplib::Response& res) {
  require_ready();
  auto r = std::make_shared<ChatRequest>(parse_chat_request(hreq.body));
  check_model(r->model);
  const std::string prompt_str = render_chat(*r);
  const std::vector<int32_t> prompt = tok->encode(prompt_str, false);
  if (prompt.empty()) throw RequestError(400, "the rendered chat prompt encodes to no tokens", "messages");
  auto runs =
      std::make_shared<std::vector<ChoiceRun>>(submit_choices(*this, prompt, r->sampling, false, true, 0));
  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_now();
  const int64_t n_prompt = int64_t(prompt.size());
  ChatOutputOptions po;
  po.enable_thinking = r->enable_thinking;
  po.parse_tools = !r->tools.empty() && r->tool_choice != "none";
  po.tools = r->tools;
  auto parsers = std::make_shared<std::vector<ChatOutputParser>>();
  for (size_t i = 0; i < runs->size(); i++) parsers->emplace_back(po);
  auto usage = [runs, n_prompt]() {
    Usage u;
    u.prompt_tokens = n_prompt;
    u.cached_tokens = (*runs)[0].h->cached_tokens();
    for (const ChoiceRun& c : *runs) u.completion_tokens += int64_t(c.tokens.size());
    return u;
  };
  auto entries = [this, as_id = r->sampling.return_tokens_as_token_ids](const ChoiceRun& c, size_t from) {
    std::vector<LogprobEntry> v;
    for (size_t k = from; k < c.tokens.size(); k++) {
      LogprobEntry e;
      e.token = token_shown(c.tokens[k], as_id);
      e.logprob = c.logprobs[k];
      for (const auto& a : c.tops[k]) e.top.push_back({token_shown(a.id, as_id), a.logprob});
      v.push_back(e);
    }
    return v;
  };
  auto finish_reason = [](const ChoiceRun& c, const ChatOutputParser& p) {
    return c.finish == "stop" && !p.tool_calls().empty() ? std::string("tool_calls") : c.finish;
  };

  if (!r->stream.stream) {
    auto feed = [&](size_t i, const std::string& text, size_t) { (*parsers)[i].feed(text); };
    if (!run_to_end(*this, *runs, PeerProbe(hreq), feed)) return;
    std::vector<ChatChoice> choices;
    for (size_t i = 0; i < runs->size(); i++) {
      ChatOutputParser& p = (*parsers)[i];
      p.finish();
      ChatChoice ch;
      ch.index = int(i);
      ch.reasoning_content = p.reasoning();
      if (p.tool_calls().empty() || !p.content().empty()) ch.content = p.content();
      for (const ToolCall& tc : p.tool_calls()) ch.tool_calls.push_back({tc.id, tc.name, tc.arguments});
      ch.finish_reason = finish_reason((*runs)[i], p);
      if (r->sampling.logprobs) ch.logprobs = entries((*runs)[i], 0);
      choices.push_back(ch);
    }
    Usage u = usage();
    generation_tokens->add(double(u.completion_tokens));
    res.set_content(chat_completion_json(id, created, opt.model_name, choices, u).dump(), kJsonType);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  // One stream per connection: node-fetch 2 (the OpenAI JS client 4.x) on Node 18 fails a chunked response
  // on a kept-alive connection with "Premature close" once the client has stopped reading at [DONE].
  res.set_header("Connection", "close");
  res.set_chunked_content_provider(
      "text/event-stream", safe_provider(runs, [=, this](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        const bool usage_key = r->stream.include_usage;
        bool ok = true;
        for (size_t i = 0; i < runs->size() && ok; i++) {
          ChatChunkDelta d;
          d.index = int(i);
          d.role = true;
          d.content = "";
          ok = write(sse_event(chat_chunk_json(id, created, opt.model_name, d, usage_key)));
        }
        if (!ok) {
          cancel_all(*runs);
          return false;
        }
        auto on_text = [&](size_t i, const std::string& text, size_t first_new, bool* wrote) {
          ChoiceRun& c = (*runs)[i];
          ChatOutputParser& p = (*parsers)[i];
          ChatDelta cd = p.feed(text);
          if (c.done) {
            ChatDelta tail = p.finish();
            cd.reasoning += tail.reasoning;
            cd.content += tail.content;
            for (auto& t : tail.tools) cd.tools.push_back(t);
          }
          const bool lp = r->sampling.logprobs && first_new < c.tokens.size();
          if (cd.empty() && !c.done && !lp) return true;
          ChatChunkDelta d;
          d.index = int(i);
          if (!cd.reasoning.empty()) d.reasoning_content = cd.reasoning;
          if (!cd.content.empty()) d.content = cd.content;
          for (const auto& t : cd.tools)
            d.tool_calls.push_back({t.index, t.started ? t.id : "", t.started ? t.name : "", t.arguments});
          if (lp) d.logprobs = entries(c, first_new);
          if (c.done) d.finish_reason = finish_reason(c, p);
          *wrote = true;
          return write(sse_event(chat_chunk_json(id, created, opt.model_name, d, usage_key)));
        };
        if (!stream_to_end(*this, *runs, sink, on_text)) return false;
        Usage u = usage();
        generation_tokens->add(double(u.completion_tokens));
        if (usage_key) write(sse_event(chat_usage_chunk_json(id, created, opt.model_name, u)));
        write(sse_done());
        sink.done();
        return true;
      }));
}

void Server::Impl::routes() {
  auto guarded = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const RequestError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, RequestError(500, std::string("internal error: ") + e.what(), "", "server_error"));
      }
    };
  };
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready)
      send_json(res, 200, {{"status", "ok"}});
    else
      send_json(res, 503, {{"status", "loading"}});
  });
  if (opt.webui) {
    // The chat page: static, and without the API key (the page asks for it and sends it to /v1). Its
    // policy keeps it to this origin: no script, style or request goes anywhere else.
    auto page = [](const httplib::Request&, httplib::Response& res) {
      const std::string_view html = chat_page_html();
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
    };
    http.Get("/", page);
    http.Get("/index.html", page);
  }
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (engine) {
      EngineStats st = engine->stats();
      running->set(double(st.running));
      waiting->set(double(st.waiting));
      std::lock_guard<std::mutex> lk(stats_mu);
      prompt_tokens->add(double(st.prompt_tokens - last_stats.prompt_tokens));
      cached_tokens->add(double(st.cached_tokens - last_stats.cached_tokens));
      last_stats = st;
    }
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
             send_json(res, 200, models_json(opt.model_name, created, opt.engine.ctx_size));
           }));
  http.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
             check_model(req.matches[1]);
             send_json(res, 200, models_json(opt.model_name, created, opt.engine.ctx_size)["data"][0]);
           }));
  http.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
              handle_completions(req, res);
            }));
  http.Post("/v1/chat/completions",
            guarded([this](const httplib::Request& req, httplib::Response& res) { handle_chat(req, res); }));
  http.Post(
      "/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
        require_ready();
        json j = json::parse(req.body, nullptr, false);
        if (!j.is_object()) throw RequestError(400, "the body must be a JSON object");
        bool add_special = j.value("add_special_tokens", true);
        std::string text;
        if (j.contains("messages")) {
          ChatRequest cr = parse_chat_request(req.body);
          text = render_chat(cr);
          add_special = false;
        } else if (j.contains("prompt") && j["prompt"].is_string()) {
          text = j["prompt"].get<std::string>();
        } else {
          throw RequestError(400, "'prompt' (a string) or 'messages' is required", "prompt");
        }
        std::vector<int32_t> ids = tok->encode(text, add_special);
        send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", opt.engine.ctx_size}});
      }));
  http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
              require_ready();
              json j = json::parse(req.body, nullptr, false);
              if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
                throw RequestError(400, "'tokens' (an array of token ids) is required", "tokens");
              std::vector<int32_t> ids;
              for (const json& t : j["tokens"]) {
                if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok->vocab_size())
                  throw RequestError(
                      400, "'tokens' must hold token ids in [0, " + std::to_string(tok->vocab_size()) + ")",
                      "tokens");
                ids.push_back(t.get<int32_t>());
              }
              send_json(res, 200, {{"prompt", tok->decode(ids, false)}});
            }));
  http.Options(R"(.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });

  // Authentication, CORS, and the request counter by status.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Origin", "*");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    const bool api = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
    if (api && !opt.api_key.empty() && req.method != "OPTIONS" &&
        req.get_header_value("Authorization") != "Bearer " + opt.api_key) {
      send_error(res, RequestError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                   "", "invalid_request_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    requests->add(1, std::to_string(res.status));
  });
  // Errors httplib produces itself (unknown route, body over the limit) get OpenAI's error object.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, RequestError(404, "no route " + req.method + " " + req.path, "",
                                   "invalid_request_error", "not_found"));
    else if (res.status == 413)
      send_error(res, RequestError(413,
                                   "the request body is over the limit of " +
                                       std::to_string(opt.max_body_mb) + " MB (--max-body-mb)",
                                   "", "invalid_request_error", "payload_too_large"));
    else
      send_error(res, RequestError(res.status, "HTTP error " + std::to_string(res.status)));
  });
}

Server::Server(ServerOptions opt) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(opt);
  impl_->http.set_payload_max_length(size_t(impl_->opt.max_body_mb) << 20);
  impl_->http.set_tcp_nodelay(true);
  const int threads = impl_->opt.http_threads;
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->routes();
}

Server::~Server() {
  stop();
}

void Server::start() {
  Impl& s = *impl_;
  if (s.opt.port == 0) {
    port_ = s.http.bind_to_any_port(s.opt.host);
    ZAYA_CHECK(port_ > 0, "zaya serve: cannot bind ", s.opt.host, " on any port");
  } else {
    ZAYA_CHECK(s.http.bind_to_port(s.opt.host, s.opt.port), "zaya serve: cannot listen on ", s.opt.host, ":",
               s.opt.port, " (in use, or not an address of this machine): choose another --port / --host");
    port_ = s.opt.port;
  }
  listener_ = std::thread([this] { impl_->http.listen_after_bind(); });
}

void Server::attach(const ZayaModel& model, const Tokenizer& tokenizer) {
  Impl& s = *impl_;
  s.model = &model;
  s.tok = &tokenizer;
  s.eos_ids.clear();
  for (int64_t id : model.cfg.eos_token_ids) s.eos_ids.push_back(int32_t(id));
  s.im_end_id = tokenizer.token_to_id("<|im_end|>");
  if (s.im_end_id >= 0 && !tokenizer.is_special(s.im_end_id)) s.im_end_id = -1;
  const int32_t bos = int32_t(model.cfg.bos_token_id);
  s.bos_text = bos >= 0 && bos < tokenizer.vocab_size() ? tokenizer.id_to_token(bos) : "";
  s.eos_text = s.eos_ids.empty() ? "" : tokenizer.id_to_token(s.eos_ids[0]);
  const std::string text = s.opt.chat_template.empty() ? builtin_zaya1_chat_template() : s.opt.chat_template;
  s.chat_template = std::make_unique<jinja::Template>(jinja::Template::parse(text, s.opt.chat_template_name));
  s.engine = std::make_unique<Engine>(model, s.opt.engine, [&s](int64_t tokens, int64_t seqs) {
    s.step_tokens->observe(double(tokens));
    s.step_seqs->observe(double(seqs));
  });
  s.ready = true;
}

void Server::stop() {
  if (!impl_) return;
  impl_->http.stop();
  if (listener_.joinable()) listener_.join();
  impl_->ready = false;
  impl_->engine.reset();
}

EngineStats Server::engine_stats() const {
  return impl_ && impl_->engine ? impl_->engine->stats() : EngineStats{};
}

void Server::wait() {
  if (listener_.joinable()) listener_.join();
}

}  // namespace zaya::serve
