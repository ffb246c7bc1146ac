// The HTTP server (src/serve/server.h) on loopback with a real model: the golden tiny ZAYA1 with a 512-token
// byte-level BPE tokenizer trained here (src/tokenizer/bpe_trainer.h; the golden checkpoint has no
// tokenizer; the same vocabulary size as the model). Real HTTP through cpp-httplib's client.
#include "serve/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "kernels/gemm.h"
#include "model/generate.h"
#include "test_util.h"
#include "tokenizer/bpe_trainer.h"

using namespace zaya;
using json = nlohmann::json;

namespace {

const char* kText =
    "The jury further said in term-end presentments that the City Executive Committee, which had over-all "
    "charge of the election, deserves the praise and thanks of the City of Atlanta for the manner in which "
    "the "
    "election was conducted. The September-October term jury had been charged by Fulton Superior Court Judge "
    "Durwood Pye to investigate reports of possible irregularities in the hard-fought primary.";

struct Fixture {
  ZayaModel model;
  Tokenizer tok;
  std::string dir;  // holds tokenizer.json (for `zaya generate`); removed at exit
};

Fixture& fixture() {
  static Fixture* f = [] {
    // The tokenizer is trained in-process (not by the zaya binary: scripts/sanitize.sh runs this test's
    // malformed-request case in an ASan build that has no binary).
    const std::string dir =
        std::filesystem::temp_directory_path() / ("zaya_server_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    BpeTrainerOptions to;
    to.vocab_size = 512;
    BpeTrainer trainer(to);
    trainer.add_text(std::string(kText) + "\n" + kText + "\n");
    { std::ofstream(dir + "/tokenizer.json") << trainer.train(); }
    auto* fx =
        new Fixture{ZayaModel::load(test::golden_dir()), Tokenizer::load(dir + "/tokenizer.json"), dir};
    std::atexit([] { std::filesystem::remove_all(fixture().dir); });
    return fx;
  }();
  return *f;
}

// The resident set of this process (the server runs in it), in kB.
int64_t rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// The token ids of a streamed completion, from its logprobs with return_tokens_as_token_ids ("token_id:N"),
// and their log-probabilities (when `logprobs` is given).
std::vector<int32_t> streamed_ids(const std::vector<json>& events, std::vector<double>* logprobs = nullptr) {
  std::vector<int32_t> ids;
  for (const json& e : events)
    for (const json& c : e["choices"])
      if (c.contains("logprobs") && c["logprobs"].is_object()) {
        for (const json& t : c["logprobs"]["tokens"])
          ids.push_back(std::stoi(t.get<std::string>().substr(9)));
        if (logprobs)
          for (const json& l : c["logprobs"]["token_logprobs"]) logprobs->push_back(l.get<double>());
      }
  return ids;
}

struct Running {
  std::unique_ptr<serve::Server> server;
  std::unique_ptr<httplib::Client> cli;
  explicit Running(serve::ServerOptions o = {}) {
    set_gemm_batch_invariant(true);
    o.port = 0;
    o.model_name = "golden";
    if (o.engine.ctx_size == serve::EngineOptions{}.ctx_size)
      o.engine.ctx_size = 256;  // the context-overflow test sends 300 tokens
    server = std::make_unique<serve::Server>(o);
    server->start();
    server->attach(fixture().model, fixture().tok);
    cli = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    cli->set_read_timeout(60, 0);
  }
  ~Running() { set_gemm_batch_invariant(false); }
  json post(const std::string& path, const json& body, int* status = nullptr) {
    auto r = cli->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r) << path << ": no response";
    if (!r) return json();
    if (status) *status = r->status;
    return json::parse(r->body);
  }
  // SSE stream -> the JSON events (without [DONE]); `done` tells whether [DONE] came last.
  std::vector<json> stream(const std::string& path, const json& body, bool* done) {
    auto r = cli->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    std::vector<json> ev;
    *done = false;
    if (!r) return ev;
    std::istringstream in(r->body);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("data: ", 0) != 0) continue;
      if (line == "data: [DONE]") {
        *done = true;
        continue;
      }
      EXPECT_FALSE(*done) << "an event after [DONE]";
      ev.push_back(json::parse(line.substr(6)));
    }
    return ev;
  }
};

}  // namespace

TEST(Server, RoutesAndErrors) {
  Running s;
  auto h = s.cli->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = s.cli->Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "golden");
  auto nf = s.cli->Get("/v1/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(json::parse(nf->body)["error"]["code"], "not_found");

  int status = 0;
  json e = s.post("/v1/completions", {{"prompt", "x"}, {"temperature", 9}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "temperature");
  auto bad = s.cli->Post("/v1/chat/completions", "{not json", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  e = s.post("/v1/completions", {{"prompt", "x"}, {"model", "other"}}, &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  std::vector<int> long_prompt(300, 5);
  e = s.post("/v1/completions", {{"prompt", long_prompt}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("256 tokens; the prompt has 300"),
            std::string::npos)
      << e.dump();
  e = s.post("/v1/completions", {{"prompt", {1, 700}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "prompt");
  // No compression even when the client accepts it (node-fetch on Node 18 failed on cpp-httplib's gzip).
  httplib::Headers gz = {{"Accept-Encoding", "gzip, deflate, br"}};
  for (bool stream : {false, true}) {
    auto z = s.cli->Post("/v1/completions", gz,
                         json({{"prompt", "The"}, {"max_tokens", 2}, {"stream", stream}}).dump(),
                         "application/json");
    ASSERT_TRUE(z);
    EXPECT_EQ(z->status, 200);
    EXPECT_FALSE(z->has_header("Content-Encoding")) << z->get_header_value("Content-Encoding");
  }
  auto zerr = s.cli->Post("/v1/completions", gz, "{bad", "application/json");
  ASSERT_TRUE(zerr);
  EXPECT_FALSE(zerr->has_header("Content-Encoding"));
  json t = s.post("/tokenize", {{"prompt", "The jury"}}, &status);
  EXPECT_EQ(status, 200);
  json d = s.post("/detokenize", {{"tokens", t["tokens"]}}, &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(d["prompt"].get<std::string>().find("The jury"), std::string::npos);
}

TEST(Server, ApiKeyAndBodyLimit) {
  serve::ServerOptions o;
  o.api_key = "sekret";
  o.max_body_mb = 1;
  Running s(o);
  auto r = s.cli->Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  r = s.cli->Get("/v1/models", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(s.cli->Get("/health")->status, 200);  // health needs no key
  std::string big = "{\"prompt\": \"" + std::string(2 << 20, 'a') + "\"}";
  r = s.cli->Post("/v1/completions", auth, big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

// The chat page (src/serve/web/chat.html, compiled in) at / and /index.html, without the API key the /v1
// routes need; --no-webui (webui = false) leaves / a 404. The page in a browser: tests/browser.
TEST(Server, ChatPage) {
  const std::string_view html = serve::chat_page_html();
  ASSERT_GT(html.size(), 1000u);
  EXPECT_EQ(html.substr(0, 15), "<!doctype html>");
  EXPECT_NE(html.find("/v1/chat/completions"), std::string_view::npos);
  EXPECT_EQ(html.back(), '\n');  // every byte of the file, none added
  serve::ServerOptions o;
  o.api_key = "sekret";
  {
    Running s(o);
    for (const char* path : {"/", "/index.html"}) {
      auto r = s.cli->Get(path);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 200) << path;
      EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8") << path;
      EXPECT_EQ(r->body, html) << path;
    }
    EXPECT_EQ(s.cli->Get("/v1/models")->status, 401);  // the API stays guarded
  }
  o.webui = false;
  Running s(o);
  auto r = s.cli->Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "not_found");
}

// Greedy completions equal generate(); streamed text equals the whole text; usage counts the tokens.
TEST(Server, CompletionsMatchGenerate) {
  Running s;
  const Fixture& f = fixture();
  const std::vector<int32_t> prompt = f.tok.encode("The jury said", true);
  GenerateOptions g;
  g.max_new_tokens = 10;
  g.stop_at_eos = false;
  auto want = generate(f.model, prompt.data(), 1, int64_t(prompt.size()), g);
  json body = {
      {"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}};
  int status = 0;
  json r = s.post("/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  // Ids past the tokenizer's 454 decode to nothing (the server's rule for a padded model vocabulary).
  std::vector<int32_t> known;
  for (int32_t id : want[0])
    if (id < f.tok.vocab_size()) known.push_back(id);
  EXPECT_EQ(r["choices"][0]["text"], f.tok.decode(known, false));
  EXPECT_EQ(r["usage"]["completion_tokens"], 10);
  EXPECT_EQ(r["usage"]["prompt_tokens"], int(prompt.size()));
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), 10u);
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  bool done = false;
  std::vector<json> ev = s.stream("/v1/completions", body, &done);
  EXPECT_TRUE(done);
  std::string text;
  size_t streamed_logprobs = 0;  // every token's, also those whose text was held back
  for (const json& e : ev)
    for (const json& c : e["choices"]) {
      text += c["text"].get<std::string>();
      if (c["logprobs"].is_object()) streamed_logprobs += c["logprobs"]["tokens"].size();
    }
  EXPECT_EQ(text, r["choices"][0]["text"]);
  EXPECT_EQ(streamed_logprobs, 10u);
  // Echo with logprobs: the streamed prompt entries are the prompt's scores (sent after its prefill).
  json echo = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}};
  json whole = s.post("/v1/completions", echo, &status);
  ASSERT_EQ(status, 200) << whole.dump();
  echo["stream"] = true;
  std::vector<json> echo_ev = s.stream("/v1/completions", echo, &done);
  ASSERT_FALSE(echo_ev.empty());
  const json& want_lp = whole["choices"][0]["logprobs"]["token_logprobs"];
  const json& got_lp = echo_ev[0]["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(got_lp.size(), prompt.size());
  EXPECT_TRUE(got_lp[0].is_null());
  for (size_t k = 1; k < prompt.size(); k++) {
    EXPECT_LT(got_lp[k].get<double>(), 0.0) << k;
    EXPECT_EQ(got_lp[k], want_lp[k]) << k;
  }
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back()["usage"]["completion_tokens"], 10);
}

// Chat: streamed deltas add up to the non-streamed message; the prompt cache serves a follow-up turn.
TEST(Server, ChatStreamsAndReusesState) {
  Running s;
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me about the jury."}}}},
               {"max_tokens", 12},
               {"temperature", 0},
               {"chat_template_kwargs", {{"enable_thinking", false}}}};
  int status = 0;
  json r = s.post("/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  const std::string content = r["choices"][0]["message"]["content"];
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  body["stream"] = true;
  bool done = false;
  std::vector<json> ev = s.stream("/v1/chat/completions", body, &done);
  EXPECT_TRUE(done);
  std::string streamed;
  for (const json& e : ev)
    for (const json& c : e["choices"])
      if (c["delta"].contains("content") && c["delta"]["content"].is_string())
        streamed += c["delta"]["content"].get<std::string>();
  EXPECT_EQ(streamed, content);
  // The next turn extends this conversation: its prompt state comes from the cache.
  json next = body;
  next.erase("stream");
  next["messages"].push_back({{"role", "assistant"}, {"content", content}});
  next["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  r = s.post("/v1/chat/completions", next, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_GT(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << r.dump();
}

// Concurrent requests of different lengths and samplers give what each gives alone (batch invariance).
TEST(Server, ConcurrentEqualsAlone) {
  serve::ServerOptions o;
  o.engine.parallel = 4;
  o.engine.batch_tokens = 16;
  Running s(o);
  std::vector<json> bodies;
  for (int i = 0; i < 8; i++) {
    json b = {
        {"prompt", std::string(kText).substr(0, 20 + 15 * i)}, {"max_tokens", 4 + i}, {"ignore_eos", true}};
    if (i % 2) {
      b["temperature"] = 0.8;
      b["seed"] = 1000 + i;
    } else {
      b["temperature"] = 0;
    }
    bodies.push_back(b);
  }
  std::vector<std::string> alone;
  for (const json& b : bodies) alone.push_back(s.post("/v1/completions", b)["choices"][0]["text"]);
  std::vector<std::string> together(bodies.size());
  std::vector<std::thread> th;
  for (size_t i = 0; i < bodies.size(); i++)
    th.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", s.server->port());
      c.set_read_timeout(60, 0);
      auto r = c.Post("/v1/completions", bodies[i].dump(), "application/json");
      if (r && r->status == 200) together[i] = json::parse(r->body)["choices"][0]["text"];
    });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < bodies.size(); i++) EXPECT_EQ(together[i], alone[i]) << "request " << i;
  auto m = s.cli->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("zaya_running_sequences 0"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("zaya_requests_total{status=\"200\"}"), std::string::npos);
}

// A client that goes away mid-stream frees its slot.
TEST(Server, DisconnectFreesSlot) {
  serve::ServerOptions o;
  o.engine.parallel = 1;
  Running s(o);
  json body = {{"prompt", "The jury"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}};
  {
    httplib::Client c("127.0.0.1", s.server->port());
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      return ++chunks < 3;  // returning false drops the connection
    };
    c.send(req);
  }
  bool idle = false;
  for (int i = 0; i < 100 && !idle; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto m = s.cli->Get("/metrics");
    idle = m && m->body.find("zaya_running_sequences 0") != std::string::npos;
  }
  EXPECT_TRUE(idle) << "the dropped stream's sequence still runs";
  int status = 0;
  json r = s.post("/v1/completions", {{"prompt", "The"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

// A non-streamed answer goes out whole (Content-Length, no chunked body: node-fetch 2 on Node 18 fails on
// those), so the server watches the connection itself: a client that gives up frees its slot long before
// its answer would have been complete. Timed against the same request run to its end.
TEST(Server, DisconnectFreesSlotNonStreamed) {
  serve::ServerOptions o;
  o.engine.parallel = 1;
  o.engine.ctx_size = 4000;
  Running s(o);
  const json body = {{"prompt", "The jury"}, {"max_tokens", 3900}, {"ignore_eos", true}};
  const auto t0 = std::chrono::steady_clock::now();
  auto whole = s.cli->Post("/v1/completions", body.dump(), "application/json");
  const double full = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(json::parse(whole->body)["usage"]["completion_tokens"], 3900) << whole->body.substr(0, 300);
  EXPECT_TRUE(whole->has_header("Content-Length")) << "a non-streamed answer is sent whole";
  EXPECT_FALSE(whole->has_header("Transfer-Encoding"));
  {
    httplib::Client c("127.0.0.1", s.server->port());
    c.set_read_timeout(0, 100000);  // gives up after 0.1 s: the connection closes
    EXPECT_FALSE(c.Post("/v1/completions", body.dump(), "application/json"));
  }
  const auto dropped = std::chrono::steady_clock::now();
  bool idle = false;
  while (!idle && std::chrono::steady_clock::now() - dropped < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto m = s.cli->Get("/metrics");
    idle = m && m->body.find("zaya_running_sequences 0") != std::string::npos;
  }
  const double freed = std::chrono::duration<double>(std::chrono::steady_clock::now() - dropped).count();
  EXPECT_TRUE(idle);
  EXPECT_LT(freed, full / 3) << "the dropped request ran on: freed after " << freed
                             << " s, a whole answer takes " << full << " s";
}

// Consistency under load: 16 streaming requests with different prompt lengths, max_tokens and samplers (even:
// greedy; odd: seeded, temperature 0.9, top_p 0.95), arriving at staggered times while others run, with 6
// slots so that some wait in the queue and join a running batch later. Every stream's tokens equal the same
// request served alone, and the greedy ones equal `zaya generate --greedy` (a separate process,
// batch-invariant GEMMs as the server's, so bitwise the same logits).
TEST(Server, LoadEqualsAloneAndGenerate) {
  serve::ServerOptions o;
  o.engine.parallel = 6;
  o.engine.batch_tokens = 24;  // prefill chunks cut by what else runs (a chunk of 24 or fewer tokens)
  Running s(o);
  const Fixture& f = fixture();
  const std::string text = std::string(kText) + " " + kText;
  struct Req {
    std::string prompt;
    json body;
  };
  std::vector<Req> reqs;
  for (int i = 0; i < 16; i++) {
    Req r;
    r.prompt = text.substr(0, 12 + size_t(i * 37) % 400);
    r.body = {{"prompt", f.tok.encode(r.prompt, true)},
              {"max_tokens", 6 + (i * 7) % 19},
              {"ignore_eos", true},
              {"stream", true},
              {"logprobs", 0},
              {"return_tokens_as_token_ids", true}};
    if (i % 2) {
      r.body["temperature"] = 0.9;
      r.body["top_p"] = 0.95;
      r.body["seed"] = 77 + i;
    } else {
      r.body["temperature"] = 0;
    }
    reqs.push_back(r);
  }
  // Tokens and their log-probabilities: bitwise equal, so a batch-dependent rounding shows even where it
  // does not change a token.
  std::vector<std::vector<int32_t>> alone, together(reqs.size());
  std::vector<std::vector<double>> alone_lp(reqs.size()), together_lp(reqs.size());
  for (size_t i = 0; i < reqs.size(); i++) {
    bool done = false;
    alone.push_back(streamed_ids(s.stream("/v1/completions", reqs[i].body, &done), &alone_lp[i]));
    EXPECT_TRUE(done);
  }
  std::vector<std::thread> th;
  for (size_t i = 0; i < reqs.size(); i++)
    th.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds((i * 53) % 160));
      httplib::Client c("127.0.0.1", s.server->port());
      c.set_read_timeout(120, 0);
      auto r = c.Post("/v1/completions", reqs[i].body.dump(), "application/json");
      if (!r || r->status != 200) return;
      std::vector<json> ev;
      std::istringstream in(r->body);
      std::string line;
      while (std::getline(in, line))
        if (line.rfind("data: {", 0) == 0) ev.push_back(json::parse(line.substr(6)));
      together[i] = streamed_ids(ev, &together_lp[i]);
    });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < reqs.size(); i++) {
    EXPECT_EQ(alone[i].size(), size_t(reqs[i].body["max_tokens"].get<int>())) << "request " << i;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
    EXPECT_EQ(together_lp[i], alone_lp[i]) << "request " << i;
  }
  // The greedy ones against `zaya generate --greedy`.
  for (size_t i = 0; i < reqs.size(); i += 2) {
    const std::string out = f.dir + "/gen" + std::to_string(i) + ".json";
    const std::string prompt_file = f.dir + "/prompt" + std::to_string(i) + ".txt";
    { std::ofstream(prompt_file) << reqs[i].prompt; }
    const std::string cmd = "(ZAYA_BATCH_INVARIANT=1 " + std::string(ZAYA_BINARY) + " generate --model " +
                            test::golden_dir() + " --tokenizer " + f.dir +
                            "/tokenizer.json --prompt \"$(cat " + prompt_file +
                            ")\" --greedy --ignore-eos --json --max-new-tokens " +
                            std::to_string(reqs[i].body["max_tokens"].get<int>()) + " > " + out + ")";
    ASSERT_EQ(test::run_shell(cmd, f.dir + "/gen.log"), 0) << test::read_text(f.dir + "/gen.log");
    json g = json::parse(test::read_text(out));
    EXPECT_EQ(g["new_tokens"][0].get<std::vector<int32_t>>(), alone[i]) << "request " << i;
  }
}

// Soak: 160 warm-up and then 320 requests from 8 clients: good ones (chat and completions, streamed or not),
// clients that drop the connection mid-stream, and bad requests (malformed JSON, wrong types, unknown model
// or route, a prompt over the context). Bounded in time by the clients' timeouts; afterwards nothing runs or
// waits, every good request got 200 and every bad one its 4xx, and the resident set is within 10% of its
// value after warm-up (measured: +5%; with the default 1 GB prompt cache the RSS grows with the cache, by ~20
// kB a request here, until the bound).
TEST(Server, SoakWithDisconnectsAndBadRequests) {
  serve::ServerOptions o;
  o.engine.parallel = 4;
  o.engine.queue_size = 64;
  o.engine.cache_mb = 2;  // the prompt-state LRU reaches its bound during warm-up (it is part of the RSS)
  Running s(o);
  const int kClients = 8, kPerClient = 40, kWarmup = 160;
  auto one = [&](httplib::Client& c, int k, std::mt19937& rng) -> std::string {
    const int kind = int(rng() % 10);
    const int max_tokens = 1 + int(rng() % 12);
    const std::string prompt = std::string(kText).substr(0, 10 + rng() % 200);
    if (kind < 4) {  // good completion, half streamed
      json b = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", bool(k % 2)}, {"seed", k}};
      auto r = c.Post("/v1/completions", b.dump(), "application/json");
      return r && r->status == 200 ? "" : "completion " + std::to_string(r ? r->status : -1);
    }
    if (kind < 6) {  // good chat, half streamed
      json b = {{"messages", {{{"role", "user"}, {"content", prompt}}}},
                {"max_tokens", max_tokens},
                {"stream", bool(k % 2)}};
      auto r = c.Post("/v1/chat/completions", b.dump(), "application/json");
      return r && r->status == 200 ? "" : "chat " + std::to_string(r ? r->status : -1);
    }
    if (kind < 8) {  // drop the connection after a few chunks
      json b = {{"prompt", prompt}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}};
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = b.dump();
      req.set_header("Content-Type", "application/json");
      int chunks = 0, stop_after = 1 + int(rng() % 4);
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < stop_after; };
      httplib::Client d("127.0.0.1", s.server->port());
      d.send(req);
      return "";
    }
    static const std::vector<std::pair<std::string, std::string>> bad = {
        {"/v1/completions", "{\"prompt\": "},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"ten\"}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\"}]}"},
        {"/v1/chat/completions", "{\"messages\": 5}"},
        {"/v1/completions", "{\"prompt\": \"x\", \"model\": \"nope\"}"},
        {"/v1/completions", "[1, 2"},
        {"/v1/completions", "{\"prompt\": [1, 99999]}"},
        {"/v1/nowhere", "{}"},
        {"/v1/completions", "{\"prompt\": " + json(std::vector<int>(400, 7)).dump() + "}"},
    };
    const auto& [path, body] = bad[rng() % bad.size()];
    auto r = c.Post(path, body, "application/json");
    if (!r) return "bad request: no response";
    if (r->status < 400 || r->status >= 500)
      return "bad request " + body.substr(0, 40) + ": " + std::to_string(r->status);
    json e = json::parse(r->body, nullptr, false);
    return e.contains("error") ? "" : "bad request without an error object";
  };
  auto run = [&](int first, int count, std::vector<std::string>& failures) {
    std::vector<std::thread> th;
    std::mutex mu;
    for (int t = 0; t < kClients; t++)
      th.emplace_back([&, t] {
        std::mt19937 rng(1234 + t + first);
        httplib::Client c("127.0.0.1", s.server->port());
        c.set_read_timeout(60, 0);
        for (int k = 0; k < count; k++) {
          std::string err = one(c, first + t * count + k, rng);
          if (!err.empty()) {
            std::lock_guard<std::mutex> lk(mu);
            failures.push_back(err);
          }
        }
      });
    for (auto& t : th) t.join();
  };
  auto idle = [&] {
    for (int i = 0; i < 200; i++) {
      auto m = s.cli->Get("/metrics");
      if (m && m->body.find("zaya_running_sequences 0") != std::string::npos &&
          m->body.find("zaya_waiting_sequences 0") != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  std::vector<std::string> failures;
  run(0, kWarmup / kClients, failures);
  ASSERT_TRUE(idle());
  const int64_t rss_warm = rss_kb();
  run(1000, kPerClient, failures);
  EXPECT_TRUE(idle()) << "sequences still running or waiting after the soak";
  const int64_t rss_end = rss_kb();
  for (size_t i = 0; i < failures.size() && i < 10; i++) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " requests failed";
  std::printf("soak: %d requests, RSS %lld kB after warm-up, %lld kB after\n",
              kWarmup + kClients * kPerClient, (long long)rss_warm, (long long)rss_end);
  EXPECT_LT(double(rss_end), 1.10 * double(rss_warm)) << rss_warm << " kB -> " << rss_end << " kB";
  // Still serving.
  int status = 0;
  json r = s.post("/v1/completions", {{"prompt", "The"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

// Malformed HTTP and malformed bodies on raw sockets (scripts/sanitize.sh runs this under ASan + UBSan):
// broken request lines and headers, lying Content-Length, bad chunked encoding, bodies cut short, every file
// of the request fuzzer's corpus truncated at several points and sent to both endpoints, binary garbage. Each
// gets an HTTP error or a closed connection, never a crash; afterwards the server is idle and answers
// normally.
TEST(Server, MalformedRequests) {
  serve::ServerOptions o;
  o.engine.parallel = 2;
  o.max_body_mb = 1;
  Running s(o);
  const int port = s.server->port();
  // Sends raw bytes and reads what comes back until the server closes (or 1 s passes).
  auto raw = [port](const std::string& bytes) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string got;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      timeval tv{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      size_t at = 0;
      while (at < bytes.size()) {
        ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (n <= 0) break;
        at += size_t(n);
      }
      char buf[4096];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) got.append(buf, size_t(n));
    }
    close(fd);
    return got;
  };
  auto http = [](const std::string& path, const std::string& body, const std::string& extra = "") {
    return "POST " + path +
           " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  std::vector<std::string> cases = {
      "",
      "\r\n\r\n",
      "GARBAGE\r\n\r\n",
      "POST\r\n\r\n",
      "POST /v1/completions HTTP/9.9\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\": \"cut",
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n",
      "POST /v1/chat/completions HTTP/1.1\r\n" + std::string(70000, 'A') + ": b\r\n\r\n",
      "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n",
      http("/v1/completions", std::string("\0\xff\xfe{\"prompt\"", 11)),
      http("/v1/chat/completions",
           "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}"),
      http("/v1/chat/completions", "{\"messages\": [{\"role\": \"tool\", \"content\": {\"a\": 1}}]}"),
      http("/v1/completions", "{\"prompt\": [[1, 2], [3, -4]]}"),
      http("/v1/completions", "{\"prompt\": \"x\", \"n\": 1e309}"),
      http("/v1/completions", "{\"prompt\": \"x\", \"stop\": [\"\"]}"),
      http("/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": {\"-1\": 5}}"),
      http("/tokenize", "{\"messages\": \"no\"}"),
      http("/detokenize", "{\"tokens\": [1.5, \"a\", null]}"),
      http("/v1/completions", std::string(2 << 20, '[')),
  };
  const std::string corpus = std::string(ZAYA_SOURCE_DIR) + "/fuzz/corpus/openai_request_fuzz";
  for (const auto& e : std::filesystem::directory_iterator(corpus)) {
    const std::string body = test::read_text(e.path().string());
    for (size_t cut : {body.size(), body.size() / 2, body.size() / 3, size_t(7)})
      for (const char* route : {"/v1/completions", "/v1/chat/completions"})
        cases.push_back(http(route, body.substr(0, std::min(cut, body.size()))));
  }
  int answered = 0;
  for (const std::string& c : cases) {
    const std::string got = raw(c);
    if (got.empty()) continue;  // closed, or still waiting for the body it was promised
    answered++;
    ASSERT_EQ(got.rfind("HTTP/1.1 ", 0), 0u) << got.substr(0, 200);
    const int status = std::atoi(got.c_str() + 9);
    // 200 only for a corpus body that happens to be whole and valid; a few are.
    EXPECT_TRUE(status == 200 || (status >= 400 && status < 500)) << status << " for " << c.substr(0, 120);
  }
  EXPECT_GT(answered, int(cases.size()) / 2);
  bool idle = false;
  for (int i = 0; i < 200 && !idle; i++) {
    auto m = s.cli->Get("/metrics");
    idle = m && m->body.find("zaya_running_sequences 0") != std::string::npos &&
           m->body.find("zaya_waiting_sequences 0") != std::string::npos;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(idle);
  int status = 0;
  json r = s.post("/v1/completions", {{"prompt", "The"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

// A full queue: one slot busy, one request waiting (queue_size 1), the next gets 503 with Retry-After and an
// OpenAI error object; once the two streams are dropped the server is idle and serves again.
TEST(Server, FullQueueAnswers503) {
  serve::ServerOptions o;
  o.engine.parallel = 1;
  o.engine.queue_size = 1;
  o.engine.ctx_size = 4096;
  Running s(o);
  std::atomic<bool> release{false};
  json body = {{"prompt", "The jury"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
  std::vector<std::thread> th;
  for (int i = 0; i < 2; i++)
    th.emplace_back([&] {
      httplib::Client c("127.0.0.1", s.server->port());
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = body.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !release.load(); };
      c.send(req);
    });
  auto gauges = [&](const char* running, const char* waiting) {
    for (int i = 0; i < 400; i++) {
      auto m = s.cli->Get("/metrics");
      if (m && m->body.find(running) != std::string::npos && m->body.find(waiting) != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  };
  ASSERT_TRUE(gauges("zaya_running_sequences 1", "zaya_waiting_sequences 1"));
  auto r =
      s.cli->Post("/v1/completions", json({{"prompt", "x"}, {"max_tokens", 1}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  json e = json::parse(r->body, nullptr, false);
  EXPECT_TRUE(e.contains("error") && e["error"].contains("message")) << r->body;
  release = true;
  for (auto& t : th) t.join();
  EXPECT_TRUE(gauges("zaya_running_sequences 0", "zaya_waiting_sequences 0"));
  int status = 0;
  json ok = s.post("/v1/completions", {{"prompt", "The"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
}

// `zaya bench serve --url` as a client of a running server (its real tokenizer may hold text back, so the
// token counts come from the streamed log-probabilities and the usage), including the chat endpoint.
TEST(Server, BenchServeAgainstARunningServer) {
  Running s;
  // Prompt ids the model has but the tokenizer does not (a padded vocabulary: here 512 vs the tokenizer's
  // ~450) are served; their text is empty (it was a 500: the prompt's text for echo decoded them).
  int status = 0;
  json r = s.post("/v1/completions", {{"prompt", {2, 511, 500}}, {"max_tokens", 2}, {"echo", true}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
  const std::string log =
      (std::filesystem::temp_directory_path() / ("zaya_bench_url_" + std::to_string(getpid()) + ".log"))
          .string();
  for (const char* endpoint : {"completions", "chat"}) {
    SCOPED_TRACE(endpoint);
    const std::string cmd = std::string(ZAYA_BINARY) +
                            " bench serve --url http://127.0.0.1:" + std::to_string(s.server->port()) +
                            " --endpoint " + endpoint +
                            " --concurrency 2 --num-prompts 3 --output-len 5 --input-len-min 4 "
                            "--input-len-max 12 --vocab-size 512 --logprobs";
    ASSERT_EQ(test::run_shell(cmd, log), 0) << test::read_text(log);
    std::istringstream in(test::read_text(log));
    std::string line;
    std::vector<json> lines;
    while (std::getline(in, line))
      if (!line.empty() && line[0] == '{') lines.push_back(json::parse(line));
    ASSERT_EQ(lines.size(), 1u) << test::read_text(log);  // no bars: they need the in-process server
    const json& j = lines[0];
    EXPECT_EQ(j["bench"], "serve");
    EXPECT_EQ(j["model"], "golden");  // from /v1/models
    EXPECT_EQ(j["completed"], 3);
    EXPECT_EQ(j["output_tokens"], 15);
    EXPECT_EQ(j["streamed_tokens"], 15);               // --logprobs: each event lists its tokens
    EXPECT_GT(j["server"]["steps"].get<double>(), 0);  // from /metrics
  }
  std::filesystem::remove(log);
}
