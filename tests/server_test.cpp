// The HTTP server (src/serve/server.h) on loopback with a real model: the golden tiny ZAYA1 with a 512-token
// byte-level BPE tokenizer trained here by `zaya tokenizer train` (the golden checkpoint has no tokenizer;
// the same vocabulary size as the model). Real HTTP through cpp-httplib's client.
#include "serve/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/gemm.h"
#include "model/generate.h"
#include "test_util.h"

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
};

Fixture& fixture() {
  static Fixture* f = [] {
    const std::string dir =
        std::filesystem::temp_directory_path() / ("zaya_server_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    { std::ofstream(dir + "/text.txt") << kText << "\n" << kText << "\n"; }
    const std::string cmd = std::string(ZAYA_BINARY) + " tokenizer train --input " + dir +
                            "/text.txt --vocab-size 512 --out " + dir + "/tokenizer.json";
    EXPECT_EQ(test::run_shell(cmd, dir + "/tok.log"), 0) << test::read_text(dir + "/tok.log");
    auto* fx = new Fixture{ZayaModel::load(test::golden_dir()), Tokenizer::load(dir + "/tokenizer.json")};
    std::filesystem::remove_all(dir);
    return fx;
  }();
  return *f;
}

struct Running {
  std::unique_ptr<serve::Server> server;
  std::unique_ptr<httplib::Client> cli;
  explicit Running(serve::ServerOptions o = {}) {
    set_gemm_batch_invariant(true);
    o.port = 0;
    o.model_name = "golden";
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
