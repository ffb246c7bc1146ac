// Request validation (openai_request.h): a small field reader that knows the JSON path it reads, so every
// error names its field ("messages[2].content[0].text") and what it expected.
#include "serve/openai_request.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace zaya::serve {

using nlohmann::json;

RequestError::RequestError(int status_, std::string message, std::string param_, std::string type_,
                           std::string code_)
    : std::runtime_error(std::move(message)),
      status(status_),
      param(std::move(param_)),
      type(type_.empty() ? (status_ == 401   ? "authentication_error"
                            : status_ == 404 ? "not_found_error"
                            : status_ == 503 ? "server_overloaded"
                            : status_ >= 500 ? "internal_server_error"
                                             : "invalid_request_error")
                         : std::move(type_)),
      code(std::move(code_)) {}

json RequestError::to_json() const {
  json e = {{"message", what()}, {"type", type}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return {{"error", e}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(400, message, param);
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) {
    s.resize(77);
    s += "...";
  }
  return s;
}

// Reads the fields of one JSON object; `path` prefixes the names in errors ("" at the top level).
struct Fields {
  const json& obj;
  std::string path;

  std::string name(const std::string& key) const { return path.empty() ? key : path + "." + key; }
  // The value of `key`, or nullptr when absent or null (OpenAI treats null as "not given").
  const json* get(const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const std::string& key) const {
    const json* v = get(key);
    if (!v) bad(name(key), "'" + name(key) + "' is required");
    return *v;
  }
  double number(const std::string& key, double def, double lo, double hi) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number()) bad(name(key), str_cat("'", name(key), "' must be a number, got ", type_name(*v)));
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      bad(name(key), "'" + name(key) + "' must be between " + str_cat(lo) + " and " + str_cat(hi) + ", got " +
                         shown(*v));
    return x;
  }
  int64_t integer(const std::string& key, int64_t def, int64_t lo, int64_t hi) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number_integer() &&
        !(v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
          std::fabs(v->get<double>()) < 9e15))
      bad(name(key), "'" + name(key) + "' must be an integer, got " + shown(*v));
    const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : (v->is_number_float() ? int64_t(v->get<double>()) : v->get<int64_t>());
    if (x < lo || x > hi)
      bad(name(key), "'" + name(key) + "' must be between " + std::to_string(lo) + " and " +
                         std::to_string(hi) + ", got " + shown(*v));
    return x;
  }
  bool boolean(const std::string& key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) bad(name(key), str_cat("'", name(key), "' must be a boolean, got ", type_name(*v)));
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& def = "") const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) bad(name(key), str_cat("'", name(key), "' must be a string, got ", type_name(*v)));
    return v->get<std::string>();
  }
};

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    // Parse again with exceptions for the position of the error.
    try {
      const json again = json::parse(body);
      (void)again;
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999999
      throw RequestError(400, std::string("the request body is not valid JSON: ") + e.what());
    }
    throw RequestError(400, "the request body is not valid JSON");
  }
  if (!j.is_object()) throw RequestError(400, "the request body must be a JSON object, got " + type_name(j));
  return j;
}

void parse_stop(const Fields& f, SamplingParams& s) {
  const json* v = f.get("stop");
  if (!v) return;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) s.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array()) bad("stop", "'stop' must be a string or an array of strings, got " + type_name(*v));
  if (v->size() > 16) bad("stop", "'stop' may hold at most 16 sequences, got " + std::to_string(v->size()));
  for (size_t k = 0; k < v->size(); k++) {
    if (!(*v)[k].is_string()) bad("stop", "'stop[" + std::to_string(k) + "]' must be a string");
    if (!(*v)[k].get<std::string>().empty()) s.stop.push_back((*v)[k].get<std::string>());
  }
}

SamplingParams parse_sampling(const Fields& f, bool chat) {
  SamplingParams s;
  const int64_t kMaxTokens = int64_t(1) << 30;
  if (chat && f.get("max_completion_tokens"))
    s.max_tokens = f.integer("max_completion_tokens", -1, 0, kMaxTokens);
  else
    s.max_tokens = f.integer("max_tokens", -1, 0, kMaxTokens);
  s.temperature = f.number("temperature", 1.0, 0.0, 2.0);
  s.top_p = f.number("top_p", 1.0, 0.0, 1.0);
  if (f.get("top_p") && s.top_p <= 0) bad("top_p", "'top_p' must be in (0, 1], got 0");
  s.top_k = f.integer("top_k", 0, -1, int64_t(1) << 31);
  if (s.top_k < 0) s.top_k = 0;  // -1: off, as vLLM
  s.min_p = f.number("min_p", 0.0, 0.0, 1.0);
  s.presence_penalty = f.number("presence_penalty", 0.0, -2.0, 2.0);
  s.frequency_penalty = f.number("frequency_penalty", 0.0, -2.0, 2.0);
  s.repetition_penalty = f.number("repetition_penalty", 1.0, 1e-6, 100.0);
  if (f.get("seed")) s.seed = uint64_t(f.integer("seed", 0, INT64_MIN, INT64_MAX));
  parse_stop(f, s);
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    for (const json& t : *ids) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad("stop_token_ids", "'stop_token_ids' must hold non-negative integers, got " + shown(t));
      s.stop_token_ids.push_back(int32_t(t.get<int64_t>()));
    }
  }
  s.ignore_eos = f.boolean("ignore_eos", false);
  s.return_tokens_as_token_ids = f.boolean("return_tokens_as_token_ids", false);
  s.n = int(f.integer("n", 1, 1, 16));
  if (chat) {
    s.logprobs = f.boolean("logprobs", false);
    s.top_logprobs = int(f.integer("top_logprobs", 0, 0, 20));
    if (s.top_logprobs > 0 && !s.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else if (const json* lp = f.get("logprobs")) {
    // Completions: an integer, the number of alternatives per token (0 = only the chosen token's).
    if (lp->is_boolean()) {
      s.logprobs = lp->get<bool>();
    } else {
      s.top_logprobs = int(f.integer("logprobs", 0, 0, 20));
      s.logprobs = true;
    }
  }
  if (const json* lb = f.get("logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    for (const auto& [key, val] : lb->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || !end || *end || id < 0 || id > INT32_MAX)
        bad("logit_bias", "'logit_bias' keys must be token ids, got '" + key + "'");
      if (!val.is_number() || !(val.get<double>() >= -100 && val.get<double>() <= 100))
        bad("logit_bias",
            "'logit_bias[" + key + "]' must be a number between -100 and 100, got " + shown(val));
      s.logit_bias[int32_t(id)] = val.get<double>();
    }
  }
  return s;
}

StreamOptions parse_stream(const Fields& f) {
  StreamOptions s;
  s.stream = f.boolean("stream", false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    s.include_usage = Fields{*so, "stream_options"}.boolean("include_usage", false);
  }
  return s;
}

void reject_response_format(const Fields& f) {
  const json* rf = f.get("response_format");
  if (!rf) return;
  if (rf->is_object() && rf->value("type", "") == "text") return;
  bad("response_format",
      "'response_format' other than {\"type\": \"text\"} (JSON mode, JSON schema) is not supported yet");
}

// Message content: a string, or text parts [{"type": "text", "text": ...}] joined without separator.
std::string message_content(const json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array())
    bad(path, "'" + path + "' must be a string or an array of content parts, got " + type_name(v));
  std::string out;
  for (size_t k = 0; k < v.size(); k++) {
    const std::string p = path + "[" + std::to_string(k) + "]";
    if (!v[k].is_object()) bad(p, "'" + p + "' must be a content part object");
    Fields part{v[k], p};
    const std::string type = part.string("type");
    if (type != "text")
      bad(p + ".type", "'" + p + ".type' is '" + type + "': only text content parts are supported");
    if (!part.get("text")) bad(p + ".text", "'" + p + ".text' is required");
    out += part.string("text");
  }
  return out;
}

ChatMessage parse_message(const json& m, size_t index) {
  const std::string path = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) bad(path, "'" + path + "' must be an object, got " + type_name(m));
  Fields f{m, path};
  ChatMessage msg;
  msg.raw = m;
  msg.role = f.string("role");
  if (!f.get("role")) bad(path + ".role", "'" + path + ".role' is required");
  if (msg.role != "system" && msg.role != "developer" && msg.role != "user" && msg.role != "assistant" &&
      msg.role != "tool")
    bad(path + ".role",
        "'" + path + ".role' must be system, developer, user, assistant or tool, got '" + msg.role + "'");
  if (const json* c = f.get("content"))
    msg.content = message_content(*c, path + ".content");
  else if (msg.role == "assistant")
    msg.content_null = true;
  else
    bad(path + ".content", "'" + path + ".content' is required for a " + msg.role + " message");
  msg.name = f.string("name");
  msg.reasoning_content = f.string("reasoning_content");
  if (const json* tc = f.get("tool_calls")) {
    if (msg.role != "assistant") bad(path + ".tool_calls", "only an assistant message may have 'tool_calls'");
    if (!tc->is_array()) bad(path + ".tool_calls", "'" + path + ".tool_calls' must be an array");
    for (size_t k = 0; k < tc->size(); k++) {
      const std::string p = path + ".tool_calls[" + std::to_string(k) + "]";
      if (!(*tc)[k].is_object()) bad(p, "'" + p + "' must be an object");
      Fields call{(*tc)[k], p};
      const json& fn = call.require("function");
      if (!fn.is_object()) bad(p + ".function", "'" + p + ".function' must be an object");
      Fields ff{fn, p + ".function"};
      ChatMessage::ToolCallIn in;
      in.id = call.string("id");
      in.name = ff.string("name");
      if (in.name.empty()) bad(p + ".function.name", "'" + p + ".function.name' is required");
      if (const json* a = ff.get("arguments"))
        in.arguments = a->is_string() ? a->get<std::string>() : a->dump();  // some clients send an object
      else
        in.arguments = "{}";
      msg.tool_calls.push_back(std::move(in));
    }
    if (msg.content_null) msg.content.clear();
  }
  if (msg.role == "tool") msg.tool_call_id = f.string("tool_call_id");
  return msg;
}

void parse_tools(const Fields& f, ChatRequest& r) {
  if (const json* tools = f.get("tools")) {
    if (!tools->is_array()) bad("tools", "'tools' must be an array");
    for (size_t k = 0; k < tools->size(); k++) {
      const std::string p = "tools[" + std::to_string(k) + "]";
      const json& t = (*tools)[k];
      if (!t.is_object()) bad(p, "'" + p + "' must be an object");
      Fields tf{t, p};
      if (tf.string("type", "function") != "function")
        bad(p + ".type", "'" + p + ".type' must be 'function'");
      const json& fn = tf.require("function");
      if (!fn.is_object()) bad(p + ".function", "'" + p + ".function' must be an object");
      Fields ff{fn, p + ".function"};
      if (ff.string("name").empty()) bad(p + ".function.name", "'" + p + ".function.name' is required");
      if (const json* params = ff.get("parameters"); params && !params->is_object())
        bad(p + ".function.parameters", "'" + p + ".function.parameters' must be a JSON schema object");
      r.tools.push_back(t);
    }
  }
  if (const json* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required")
        bad("tool_choice",
            "'tool_choice' must be none, auto, required or a function, got '" + r.tool_choice + "'");
    } else if (tc->is_object()) {
      Fields cf{*tc, "tool_choice"};
      const json& fn = cf.require("function");
      if (!fn.is_object()) bad("tool_choice.function", "'tool_choice.function' must be an object");
      r.tool_choice = "function";
      r.tool_choice_function = Fields{fn, "tool_choice.function"}.string("name");
      bool known = false;
      for (const json& t : r.tools) known |= t["function"].value("name", "") == r.tool_choice_function;
      if (!known)
        bad("tool_choice.function.name",
            "'tool_choice' names the function '" + r.tool_choice_function + "', which is not in 'tools'");
    } else {
      bad("tool_choice", "'tool_choice' must be a string or an object, got " + type_name(*tc));
    }
    if (r.tool_choice == "required" && r.tools.empty())
      bad("tool_choice", "'tool_choice' is 'required' but the request has no 'tools'");
  }
}

}  // namespace

ChatRequest parse_chat_request(const std::string& body) {
  const json j = parse_body(body);
  Fields f{j, ""};
  ChatRequest r;
  r.model = f.string("model");
  const json& messages = f.require("messages");
  if (!messages.is_array() || messages.empty())
    bad("messages", "'messages' must be a non-empty array of messages");
  for (size_t k = 0; k < messages.size(); k++) r.messages.push_back(parse_message(messages[k], k));
  r.sampling = parse_sampling(f, true);
  r.stream = parse_stream(f);
  parse_tools(f, r);
  reject_response_format(f);
  if (const json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = *kw;
    r.enable_thinking = Fields{*kw, "chat_template_kwargs"}.boolean("enable_thinking", true);
  }
  r.add_generation_prompt = f.boolean("add_generation_prompt", true);
  r.continue_final_message = f.boolean("continue_final_message", false);
  if (r.continue_final_message && r.add_generation_prompt && f.get("add_generation_prompt"))
    bad("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  if (r.continue_final_message) r.add_generation_prompt = false;
  return r;
}

CompletionRequest parse_completion_request(const std::string& body) {
  const json j = parse_body(body);
  Fields f{j, ""};
  CompletionRequest r;
  r.model = f.string("model");
  const json& prompt = f.require("prompt");
  auto ids_of = [](const json& arr, const std::string& path) {
    std::vector<int32_t> ids;
    for (const json& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad(path, "'" + path + "' must hold non-negative integer token ids, got " + shown(t));
      ids.push_back(int32_t(t.get<int64_t>()));
    }
    return ids;
  };
  if (prompt.is_string()) {
    r.prompts.push_back({prompt.get<std::string>(), {}, false});
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt[0].is_number()) {
      r.prompts.push_back({"", ids_of(prompt, "prompt"), true});
    } else {
      if (prompt.size() > 64) bad("prompt", "'prompt' may hold at most 64 prompts");
      for (size_t k = 0; k < prompt.size(); k++) {
        const std::string p = "prompt[" + std::to_string(k) + "]";
        if (prompt[k].is_string())
          r.prompts.push_back({prompt[k].get<std::string>(), {}, false});
        else if (prompt[k].is_array())
          r.prompts.push_back({"", ids_of(prompt[k], p), true});
        else
          bad(p, "'" + p + "' must be a string or an array of token ids, got " + type_name(prompt[k]));
      }
    }
  } else {
    bad("prompt", "'prompt' must be a string, an array of strings or token ids, got " +
                      (prompt.is_array() ? std::string("an empty array") : type_name(prompt)));
  }
  for (size_t k = 0; k < r.prompts.size(); k++)
    if (r.prompts[k].is_ids && r.prompts[k].ids.empty()) bad("prompt", "'prompt' holds an empty token list");
  r.sampling = parse_sampling(f, false);
  r.stream = parse_stream(f);
  r.echo = f.boolean("echo", false);
  r.suffix = f.string("suffix");
  if (!r.suffix.empty()) bad("suffix", "'suffix' (fill-in-the-middle) is not supported");
  reject_response_format(f);
  return r;
}

}  // namespace zaya::serve
