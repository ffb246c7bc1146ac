// The OpenAI-compatible HTTP server (`zaya serve`): routes, authentication, request limits and the
// translation between OpenAI requests and engine sequences (chat template, tokenizer, stop strings,
// reasoning and tool-call parsing, log-probabilities, streaming). docs/serving.md lists every endpoint.
//
//   Server s(options);          // binds and answers /health with 503 while the model loads
//   s.start();                  // listener thread
//   s.attach(model, tokenizer); // ready: the engine starts
//   ...; s.stop();
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "model/zaya.h"
#include "serve/engine.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace zaya::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (port() tells which)
  std::string model_name = "zaya";  // the id /v1/models lists and requests may name
  std::string api_key;              // non-empty: every /v1 request needs "Authorization: Bearer KEY"
  int64_t max_body_mb = 16;         // bodies above it get 413
  std::string chat_template;        // template text; empty: the built-in ZAYA1 template
  std::string chat_template_name = "zaya1.jinja";
  int http_threads = 64;  // connections served at once (each streaming client holds one)
  bool webui = true;      // the chat page at / and /index.html (needs no API key: it asks for one)
  EngineOptions engine;
};

class Server {
 public:
  explicit Server(ServerOptions opt);
  ~Server();
  // Binds host:port (throws zaya::Error naming them when it cannot) and serves in a background thread.
  void start();
  // The model is loaded: builds the engine and answers requests. The model and tokenizer must outlive
  // the server.
  void attach(const ZayaModel& model, const Tokenizer& tokenizer);
  void stop();
  int port() const { return port_; }
  // The engine's counters (zeros before attach()).
  EngineStats engine_stats() const;
  // Blocks until stop() (or a fatal listener error).
  void wait();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::thread listener_;
};

// The built-in ZAYA1 chat template (configs/chat_templates/zaya1.jinja, compiled in).
const char* builtin_zaya1_chat_template();
// The chat page served at / (src/serve/web/chat.html, compiled in).
std::string_view chat_page_html();

}  // namespace zaya::serve
