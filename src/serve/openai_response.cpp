// OpenAI response shapes (openai_response.h). Text that a model produced may be invalid UTF-8 (a token can
// end inside a character); every dump replaces such bytes with U+FFFD instead of throwing.
#include "serve/openai_response.h"

namespace zaya::serve {

using nlohmann::json;

namespace {

json logprob_content(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json top = json::array();
    for (const auto& [tok, lp] : e.top)
      top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", utf8_bytes(tok)}});
    content.push_back(
        {{"token", e.token}, {"logprob", e.logprob}, {"bytes", utf8_bytes(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json tool_calls_json(const std::vector<ToolCallOut>& calls) {
  json out = json::array();
  for (const ToolCallOut& c : calls)
    out.push_back(
        {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace

std::vector<int> utf8_bytes(const std::string& s) {
  std::vector<int> out;
  out.reserve(s.size());
  for (unsigned char c : s) out.push_back(c);
  return out;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json chat_completion_json(const std::string& id, int64_t created, const std::string& model,
                          const std::vector<ChatChoice>& choices, const Usage& usage) {
  json cs = json::array();
  for (const ChatChoice& c : choices) {
    json msg = {{"role", "assistant"}, {"content", c.content ? json(*c.content) : json(nullptr)}};
    if (!c.reasoning_content.empty()) msg["reasoning_content"] = c.reasoning_content;
    if (!c.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(c.tool_calls);
    cs.push_back({{"index", c.index},
                  {"message", msg},
                  {"logprobs", c.logprobs ? logprob_content(*c.logprobs) : json(nullptr)},
                  {"finish_reason", c.finish_reason}});
  }
  return {{"id", id},      {"object", "chat.completion"}, {"created", created}, {"model", model},
          {"choices", cs}, {"usage", usage_json(usage)}};
}

json chat_chunk_json(const std::string& id, int64_t created, const std::string& model,
                     const ChatChunkDelta& d, bool usage_key) {
  json delta = json::object();
  if (d.role) delta["role"] = "assistant";
  if (d.content) delta["content"] = *d.content;
  if (d.reasoning_content) delta["reasoning_content"] = *d.reasoning_content;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const ChatChunkDelta::Tool& t : d.tool_calls) {
      json call = {{"index", t.index}};
      json fn = {{"arguments", t.arguments}};
      if (!t.id.empty()) {
        call["id"] = t.id;
        call["type"] = "function";
        fn["name"] = t.name;
      }
      call["function"] = fn;
      calls.push_back(call);
    }
    delta["tool_calls"] = calls;
  }
  json choice = {{"index", d.index},
                 {"delta", delta},
                 {"logprobs", d.logprobs ? logprob_content(*d.logprobs) : json(nullptr)},
                 {"finish_reason", d.finish_reason ? json(*d.finish_reason) : json(nullptr)}};
  json j = {{"id", id},
            {"object", "chat.completion.chunk"},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})}};
  if (usage_key) j["usage"] = nullptr;
  return j;
}

json chat_usage_chunk_json(const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage) {
  return {{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
          {"model", model}, {"choices", json::array()},          {"usage", usage_json(usage)}};
}

json completion_json(const std::string& id, int64_t created, const std::string& model,
                     const std::vector<CompletionChoice>& choices, const Usage* usage, bool usage_key) {
  json cs = json::array();
  for (const CompletionChoice& c : choices) {
    json lp = nullptr;
    if (c.logprobs) {
      const auto& L = *c.logprobs;
      json tlp = json::array(), top = json::array();
      for (const auto& v : L.token_logprobs) tlp.push_back(v ? json(*v) : json(nullptr));
      for (const auto& alts : L.top_logprobs) {
        if (alts.empty()) {
          top.push_back(nullptr);
          continue;
        }
        json m = json::object();
        for (const auto& [tok, v] : alts) m[tok] = v;
        top.push_back(m);
      }
      lp = {{"tokens", L.tokens},
            {"token_logprobs", tlp},
            {"top_logprobs", top},
            {"text_offset", L.text_offset}};
    }
    cs.push_back({{"index", c.index},
                  {"text", c.text},
                  {"logprobs", lp},
                  {"finish_reason", c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason)}});
  }
  json j = {
      {"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"choices", cs}};
  if (usage)
    j["usage"] = usage_json(*usage);
  else if (usage_key)
    j["usage"] = nullptr;
  return j;
}

json models_json(const std::string& model, int64_t created, int64_t max_model_len) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "zaya.cpp"},
                                 {"max_model_len", max_model_len}}})}};
}

std::string sse_event(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace zaya::serve
