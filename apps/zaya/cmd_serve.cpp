// zaya serve: the OpenAI-compatible server (src/serve/server.h) over the continuous-batching engine.
// Binds first (GET /health answers 503 while the model loads), then loads the model and tokenizer.
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "kernels/gemm.h"
#include "load_flags.h"
#include "model/zaya-config.h"
#include "serve/server.h"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The checkpoint's own chat template: chat_template.jinja, else tokenizer_config.json's chat_template (a
// string, or a list of {name, template} where "default" is used). Empty: none.
std::string find_chat_template(const std::string& dir, std::string* from) {
  const std::string jinja = dir + "/chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    *from = jinja;
    return read_text(jinja);
  }
  const std::string tc = dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(tc)) return "";
  nlohmann::json j = nlohmann::json::parse(read_text(tc), nullptr, false);
  ZAYA_CHECK(!j.is_discarded(), tc, ": not valid JSON");
  if (!j.contains("chat_template")) return "";
  const auto& t = j["chat_template"];
  *from = tc + " (chat_template)";
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  throw zaya::Error(
      tc + ": chat_template must be a string or a list holding {\"name\": \"default\", \"template\": ...}");
}

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a ZAYA1 checkpoint over an OpenAI-compatible HTTP API (continuous batching)"};
  std::string model_dir, tokenizer_path, dtype = "bf16", template_path, api_key_file;
  zaya::serve::ServerOptions so;
  zaya::app::LoadFlags semantics;
  bool no_cache_prompt = false, no_batch_invariant = false, no_webui = false;
  app.add_option("--model", model_dir, "HF checkpoint directory")->required();
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (default: MODEL/tokenizer.json)");
  app.add_option("--host", so.host, "address to bind")->capture_default_str();
  app.add_option("--port", so.port, "port to bind (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--served-model-name", so.model_name,
                 "the model id clients send (default: the directory name)");
  app.add_option("--parallel", so.engine.parallel, "sequences decoded at once")
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  app.add_option("--batch-tokens", so.engine.batch_tokens,
                 "tokens per engine step (decodes + prefill chunks)")
      ->capture_default_str();
  app.add_option("--ctx-size", so.engine.ctx_size, "context per sequence: prompt + output tokens")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 24))
      ->capture_default_str();
  app.add_option("--queue-size", so.engine.queue_size, "requests waiting for a slot before 503")
      ->capture_default_str();
  app.add_flag("--no-cache-prompt", no_cache_prompt,
               "do not reuse earlier sequences' states (on by default)");
  app.add_option("--cache-mb", so.engine.cache_mb, "memory bound of the prompt-state cache")
      ->capture_default_str();
  app.add_option("--api-key", so.api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  app.add_option("--api-key-file", api_key_file, "read the API key from this file");
  app.add_option("--max-body-mb", so.max_body_mb, "largest request body")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  app.add_flag("--no-webui", no_webui, "do not serve the chat page at / (the API is unchanged)");
  app.add_option("--chat-template", template_path,
                 "a Jinja chat template file (default: the checkpoint's, else ZAYA1's)");
  app.add_flag(
      "--no-batch-invariant", no_batch_invariant,
      "the fastest per-shape GEMMs instead of the row-invariant ones (outputs then depend on the batch "
      "in the last bits; prefill ~30% faster)");
  app.add_option("--dtype", dtype, "GEMM compute dtype")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  zaya::app::add_load_flags(app, semantics);
  ZAYA_PARSE(app, argc, argv);
  so.engine.cache_prompt = !no_cache_prompt;
  so.webui = !no_webui;
  // The engine's own checks, before binding and loading (the same message as at construction).
  ZAYA_CHECK(so.engine.batch_tokens >= so.engine.parallel, "--batch-tokens (", so.engine.batch_tokens,
             ") must be at least --parallel (", so.engine.parallel,
             "): every running sequence decodes each step");
  ZAYA_CHECK(so.engine.queue_size >= 0 && so.engine.cache_mb >= 0,
             "--queue-size and --cache-mb must be non-negative");
  // Batch invariance on by default (docs/serving.md): a sequence's output does not depend on what else is
  // served. ZAYA_BATCH_INVARIANT=0 in the environment turns it off like the flag.
  const char* env_bi = std::getenv("ZAYA_BATCH_INVARIANT");
  zaya::set_gemm_batch_invariant(!no_batch_invariant && !(env_bi && std::string(env_bi) == "0"));
  if (!api_key_file.empty()) so.api_key = trim(read_text(api_key_file));
  if (!app.count("--served-model-name"))
    so.model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (so.model_name.empty() || so.model_name == ".") so.model_name = "zaya";
  std::string template_from = "built-in ZAYA1 template (configs/chat_templates/zaya1.jinja)";
  if (!template_path.empty()) {
    so.chat_template = read_text(template_path);
    template_from = template_path;
  } else {
    so.chat_template = find_chat_template(model_dir, &template_from);
    if (so.chat_template.empty())
      template_from = "built-in ZAYA1 template (configs/chat_templates/zaya1.jinja)";
  }
  so.chat_template_name = std::filesystem::path(template_from).filename().string();

  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not the end of the server
  zaya::serve::Server server(so);
  server.start();
  std::fprintf(stderr,
               "zaya serve: listening on http://%s:%d (loading the model; /health answers 503 until ready)\n",
               so.host.c_str(), server.port());

  zaya::LoadOptions lo;
  lo.compute = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  semantics.apply(lo);
  auto t0 = std::chrono::steady_clock::now();
  zaya::ZayaModel model = zaya::ZayaModel::load(model_dir, lo);
  if (tokenizer_path.empty()) tokenizer_path = model_dir + "/tokenizer.json";
  ZAYA_CHECK(std::filesystem::exists(tokenizer_path), tokenizer_path,
             ": no tokenizer; pass --tokenizer FILE (a tokenizer.json)");
  zaya::Tokenizer tok = zaya::Tokenizer::load(tokenizer_path);
  const auto& c = model.cfg;
  std::fprintf(stderr, "zaya serve: loaded %s in %.1f s (%.3f B parameters, %s GEMMs); chat template: %s\n",
               model_dir.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               c.num_params() / 1e9, dtype.c_str(), template_from.c_str());
  // Memory: the CCA cache per token of context beside a full-head (uncompressed MHA) KV cache.
  // Both in the cache's dtype (--kv-cache).
  const double per_tok = double(zaya::serve::Engine::bytes_per_token(c, model.kv_cache));
  const double full_head = double(c.num_hidden_layers) * 2 * c.num_attention_heads * c.head_dim *
                           (model.kv_cache == zaya::DType::BF16 ? 2 : 4);
  std::fprintf(
      stderr,
      "zaya serve: CCA cache %.1f KiB per token of context in %s (a full-head KV cache: %.1f KiB, %.1fx); "
      "%ld slots x %ld tokens = %.1f MiB, prompt-state cache up to %ld MiB; batch-invariant GEMMs %s\n",
      per_tok / 1024, model.kv_cache == zaya::DType::BF16 ? "bf16" : "fp32", full_head / 1024,
      full_head / per_tok, long(so.engine.parallel), long(so.engine.ctx_size),
      (per_tok * so.engine.ctx_size + zaya::serve::Engine::fixed_bytes_per_seq(c)) * so.engine.parallel /
          (1 << 20),
      long(so.engine.cache_prompt ? so.engine.cache_mb : 0), zaya::gemm_batch_invariant() ? "on" : "off");
  std::vector<std::string> as_text;
  for (const char* m : {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<zyphra_tool_call>",
                        "</zyphra_tool_call>", "<zyphra_tool_response>", "</zyphra_tool_response>"}) {
    const int32_t id = tok.token_to_id(m);
    if (id < 0 || !tok.is_special(id)) as_text.push_back(m);
  }
  if (!as_text.empty()) {
    std::string list;
    for (const auto& m : as_text) list += (list.empty() ? "" : " ") + m;
    std::fprintf(
        stderr,
        "zaya serve: note: this tokenizer has no special token for %s: the chat template's markers are "
        "encoded as text (ZAYA1's own tokenizer has them)\n",
        list.c_str());
  }
  server.attach(model, tok);
  std::fprintf(stderr, "zaya serve: ready: model '%s', %ld parallel sequences, context %ld tokens\n",
               so.model_name.c_str(), long(so.engine.parallel), long(so.engine.ctx_size));
  if (so.webui)
    std::fprintf(stderr, "zaya serve: chat page at http://%s:%d/\n", so.host.c_str(), server.port());
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.stop();
  std::fprintf(stderr, "zaya serve: stopped\n");
  return 0;
}

zaya::app::Register reg("serve", "serve a checkpoint over an OpenAI-compatible HTTP API", cmd_serve);

}  // namespace
