// The generated text -> reasoning / content / tool calls state machine (chat_output.h). One buffer of
// unconsumed text; each state consumes from its front what it can decide and holds back the rest.
#include "serve/chat_output.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <initializer_list>

#include "core/error.h"

namespace zaya::serve {

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<zyphra_tool_call>", kToolClose = "</zyphra_tool_call>";
constexpr std::string_view kFuncOpen = "<function=", kFuncClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=", kParamClose = "</parameter>";

bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// The length of the longest suffix of `s` that is a proper prefix of one of `markers`: text that may still
// become a marker when more arrives.
size_t held_suffix(std::string_view s, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers)
    for (size_t n = std::min(s.size(), m.size() - 1); n > best; n--)
      if (s.compare(s.size() - n, n, m, 0, n) == 0) {
        best = n;
        break;
      }
  return best;
}

bool all_space(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

size_t skip_space(std::string_view s, size_t i = 0) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
  return i;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string strip(const std::string& s) {
  const size_t b = skip_space(s);
  size_t e = s.size();
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

// ---- Python literals (ast.literal_eval's subset a model writes: dicts, lists, tuples, strings, numbers,
// True / False / None) -> JSON ----

struct PyLiteral {
  std::string_view s;
  size_t i = 0;
  void ws() { i = skip_space(s, i); }
  [[noreturn]] void bad() { throw Error("not a Python literal"); }
  nlohmann::json value(int depth = 0) {
    if (depth > 64) bad();
    ws();
    if (i >= s.size()) bad();
    const char c = s[i];
    if (c == '{' || c == '[' || c == '(') {
      const char close = c == '{' ? '}' : c == '[' ? ']' : ')';
      i++;
      nlohmann::json out = c == '{' ? nlohmann::json::object() : nlohmann::json::array();
      for (;;) {
        ws();
        if (i < s.size() && s[i] == close) {
          i++;
          return out;
        }
        nlohmann::json v = value(depth + 1);
        if (c == '{') {
          ws();
          if (i >= s.size() || s[i] != ':' || !v.is_string()) bad();
          i++;
          out[v.get<std::string>()] = value(depth + 1);
        } else {
          out.push_back(std::move(v));
        }
        ws();
        if (i < s.size() && s[i] == ',') {
          i++;
          continue;
        }
        ws();
        if (i < s.size() && s[i] == close) {
          i++;
          return out;
        }
        bad();
      }
    }
    if (c == '\'' || c == '"') return string(c);
    for (auto [word, v] :
         {std::pair<std::string_view, nlohmann::json>{"True", true}, {"False", false}, {"None", nullptr}})
      if (starts_with(s.substr(i), word)) {
        i += word.size();
        return v;
      }
    // A number: JSON's grammar covers what literal_eval accepts for plain ints and floats.
    size_t j = i;
    while (j < s.size() &&
           (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '-' || s[j] == '+'))
      j++;
    nlohmann::json n = nlohmann::json::parse(s.substr(i, j - i), nullptr, false);
    if (n.is_discarded() || !n.is_number()) bad();
    i = j;
    return n;
  }
  nlohmann::json string(char q) {
    std::string out;
    for (i++; i < s.size(); i++) {
      char c = s[i];
      if (c == q) {
        i++;
        return out;
      }
      if (c == '\\' && i + 1 < s.size()) {
        c = s[++i];
        switch (c) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case '0':
            out += '\0';
            break;
          default:
            out += c;  // \\, \', \"
        }
        continue;
      }
      out += c;
    }
    bad();
  }
};

// A JSON string literal; invalid UTF-8 (a model can emit any bytes) becomes U+FFFD instead of throwing.
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// JSON text with Python's json.dumps separators (", " and ": "), UTF-8 kept as is (ensure_ascii=False).
std::string python_json(const nlohmann::json& v) {
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      out += (first ? "" : ", ") + json_string(k) + ": " + python_json(x);
      first = false;
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t k = 0; k < v.size(); k++) out += (k ? ", " : "") + python_json(v[k]);
    return out + "]";
  }
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool is_string_type(const std::string& t) {
  return t == "string" || t == "str" || t == "text" || t == "varchar" || t == "char" || t == "enum";
}
bool is_int_type(const std::string& t) {
  return starts_with(t, "int") || starts_with(t, "uint") || starts_with(t, "long") ||
         starts_with(t, "short") || starts_with(t, "unsigned");
}
bool is_float_type(const std::string& t) {
  return starts_with(t, "num") || starts_with(t, "float");
}
bool is_bool_type(const std::string& t) {
  return t == "boolean" || t == "bool" || t == "binary";
}
bool is_structured_type(const std::string& t) {
  return t == "object" || t == "array" || t == "arr" || t == "sequence" || starts_with(t, "dict") ||
         starts_with(t, "list");
}

}  // namespace

nlohmann::json convert_tool_parameter(const std::string& raw, const std::string& type_in) {
  if (lower(raw) == "null") return nullptr;
  const std::string t = lower(strip(type_in));
  if (is_string_type(t)) return raw;
  if (is_int_type(t)) {
    // Python's int(): surrounding whitespace, a sign, digits (underscores between them).
    const std::string s = strip(raw);
    std::string digits;
    size_t k = 0;
    if (k < s.size() && (s[k] == '+' || s[k] == '-')) digits += s[k++];
    bool ok = k < s.size();
    for (; k < s.size() && ok; k++) {
      if (std::isdigit(static_cast<unsigned char>(s[k])))
        digits += s[k];
      else if (!(s[k] == '_' && k > 0 && k + 1 < s.size() &&
                 std::isdigit(static_cast<unsigned char>(s[k + 1])) &&
                 std::isdigit(static_cast<unsigned char>(s[k - 1]))))
        ok = false;
    }
    if (ok) {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(digits.c_str(), &end, 10);
      if (errno == 0 && end && *end == '\0') return v;
    }
    return raw;
  }
  if (is_float_type(t)) {
    const std::string s = strip(raw);
    char* end = nullptr;
    const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
    if (s.empty() || !end || *end != '\0' || !std::isfinite(v)) return raw;
    if (v == std::trunc(v) && std::fabs(v) < 9.2e18) return static_cast<long long>(v);
    return v;
  }
  if (is_bool_type(t)) return lower(raw) == "true";
  if (is_structured_type(t)) {
    nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
    if (!j.is_discarded()) return j;
    try {
      PyLiteral p{raw};
      nlohmann::json v = p.value();
      p.ws();
      if (p.i == raw.size()) return v;
    } catch (const Error&) {
    }
    return raw;
  }
  return raw;  // strings, and types a schema may name that are none of the above
}

ChatOutputParser::ChatOutputParser(ChatOutputOptions options) : o_(std::move(options)) {
  rng_.seed(o_.id_seed ? o_.id_seed : std::random_device{}());
}

std::string ChatOutputParser::new_call_id() {
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int k = 0; k < 24; k++) id += hex[rng_() % 16];
  return id;
}

void ChatOutputParser::emit_reasoning(ChatDelta& d, std::string_view s) {
  d.reasoning += s;
  reasoning_ += s;
}

void ChatOutputParser::emit_content(ChatDelta& d, std::string_view s) {
  d.content += s;
  content_ += s;
}

void ChatOutputParser::tool_piece(ChatDelta& d, const std::string& piece, bool start) {
  ToolCall& call = calls_.back();
  call.arguments += piece;
  const int index = int(calls_.size()) - 1;
  // Merge with this feed's earlier piece of the same call (one entry per call per delta, as OpenAI's).
  if (!d.tools.empty() && d.tools.back().index == index) {
    d.tools.back().arguments += piece;
    return;
  }
  ChatDelta::Tool t;
  t.index = index;
  t.started = start;
  if (start) {
    t.id = call.id;
    t.name = call.name;
  }
  t.arguments = piece;
  d.tools.push_back(std::move(t));
}

std::string ChatOutputParser::param_type(const std::string& param) const {
  if (!o_.tools.is_array() || calls_.empty()) return "string";
  for (const nlohmann::json& tool : o_.tools) {
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) continue;
    const nlohmann::json& f = tool["function"];
    if (f.value("name", std::string()) != calls_.back().name) continue;
    const nlohmann::json* props = nullptr;
    if (f.contains("parameters") && f["parameters"].is_object() && f["parameters"].contains("properties") &&
        f["parameters"]["properties"].is_object())
      props = &f["parameters"]["properties"];
    if (!props || !props->contains(param) || !(*props)[param].is_object()) return "string";
    const nlohmann::json& type = (*props)[param].value("type", nlohmann::json("string"));
    if (type.is_string()) return type.get<std::string>();
    if (type.is_array())  // ["integer", "null"]: the first type that is not null
      for (const nlohmann::json& t : type)
        if (t.is_string() && t.get<std::string>() != "null") return t.get<std::string>();
    return "string";
  }
  return "string";
}

void ChatOutputParser::open_function(ChatDelta& d, const std::string& name) {
  if (in_function_) close_function(d);  // a second <function=...> in one call: the first one ends
  calls_.push_back({new_call_id(), strip(name), ""});
  in_function_ = true;
  params_in_call_ = 0;
  ChatDelta::Tool t;
  t.index = int(calls_.size()) - 1;
  t.started = true;
  t.id = calls_.back().id;
  t.name = calls_.back().name;
  d.tools.push_back(std::move(t));
}

void ChatOutputParser::close_parameter(ChatDelta& d, std::string value) {
  in_parameter_ = false;
  if (!in_function_) return;  // a parameter outside any function: nothing to attach it to
  if (!value.empty() && value.front() == '\n') value.erase(0, 1);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  const nlohmann::json v = convert_tool_parameter(value, param_type(param_name_));
  tool_piece(d, (params_in_call_ ? ", " : "{") + json_string(param_name_) + ": " + python_json(v), false);
  params_in_call_++;
}

void ChatOutputParser::close_function(ChatDelta& d) {
  if (!in_function_) return;
  tool_piece(d, params_in_call_ ? "}" : "{}", false);
  in_function_ = false;
}

// Start: decide between reasoning and content; drop a leading <think>.
// Reasoning: up to </think> (or an implicit end at a tool call that opens a function).
bool ChatOutputParser::step_reasoning(ChatDelta& d, bool at_end) {
  const size_t close = buf_.find(kThinkClose);
  const size_t tool = o_.parse_tools ? buf_.find(kToolOpen) : std::string::npos;
  if (close != std::string::npos && (tool == std::string::npos || close < tool)) {
    emit_reasoning(d, std::string_view(buf_).substr(0, close));
    buf_.erase(0, close + kThinkClose.size());
    state_ = State::Content;
    return true;
  }
  if (tool != std::string::npos) {
    const std::string_view after = std::string_view(buf_).substr(skip_space(buf_, tool + kToolOpen.size()));
    const bool function = starts_with(after, "<function");
    const bool maybe = !function && std::string_view("<function").substr(0, after.size()) == after;
    if (function || (maybe && !at_end)) {
      emit_reasoning(d, std::string_view(buf_).substr(0, tool));
      buf_.erase(0, tool);
      if (function) state_ = State::Content;
      return function;  // otherwise wait for what follows the tag
    }
    // A tool-call tag mentioned in the reasoning: reasoning text.
    emit_reasoning(d, std::string_view(buf_).substr(0, tool + kToolOpen.size()));
    buf_.erase(0, tool + kToolOpen.size());
    return true;
  }
  const size_t hold = at_end ? 0 : held_suffix(buf_, {kThinkClose, kToolOpen});
  emit_reasoning(d, std::string_view(buf_).substr(0, buf_.size() - hold));
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool ChatOutputParser::step_content(ChatDelta& d, bool at_end) {
  if (after_call_) {  // whitespace between and after tool calls is not content
    const size_t ws = skip_space(buf_);
    if (ws == buf_.size() && !at_end) return false;
    buf_.erase(0, ws);
    after_call_ = buf_.empty();
  }
  const size_t tool = o_.parse_tools ? buf_.find(kToolOpen) : std::string::npos;
  if (tool != std::string::npos) {
    std::string_view before = std::string_view(buf_).substr(0, tool);
    if (!(calls_.empty() ? before.empty() : all_space(before))) emit_content(d, before);
    buf_.erase(0, tool + kToolOpen.size());
    state_ = State::ToolCall;
    return true;
  }
  const size_t hold = at_end || !o_.parse_tools ? 0 : held_suffix(buf_, {kToolOpen});
  emit_content(d, std::string_view(buf_).substr(0, buf_.size() - hold));
  buf_.erase(0, buf_.size() - hold);
  return false;
}

// Inside <zyphra_tool_call>: tags and parameter values.
bool ChatOutputParser::step_tool_call(ChatDelta& d, bool at_end) {
  if (in_parameter_) {
    size_t end = std::string::npos;
    for (std::string_view m : {kParamClose, kFuncClose, kToolClose}) end = std::min(end, buf_.find(m));
    if (end == std::string::npos) {
      if (!at_end) return false;
      end = buf_.size();
    }
    close_parameter(d, buf_.substr(0, end));
    if (starts_with(std::string_view(buf_).substr(end), kParamClose)) end += kParamClose.size();
    buf_.erase(0, end);
    return true;
  }
  buf_.erase(0, skip_space(buf_));
  std::string_view b = buf_;
  for (std::string_view open : {kFuncOpen, kParamOpen}) {
    if (!starts_with(b, open)) continue;
    const size_t gt = b.find('>');
    if (gt == std::string::npos) {
      if (!at_end) return false;
      buf_.clear();
      return true;
    }
    const std::string name(b.substr(open.size(), gt - open.size()));
    buf_.erase(0, gt + 1);
    if (open == kFuncOpen) {
      open_function(d, name);
    } else {
      in_parameter_ = true;
      param_name_ = strip(name);
    }
    return true;
  }
  if (starts_with(b, kFuncClose)) {
    close_function(d);
    buf_.erase(0, kFuncClose.size());
    return true;
  }
  if (starts_with(b, kToolClose)) {
    close_function(d);
    buf_.erase(0, kToolClose.size());
    state_ = State::Content;
    after_call_ = true;
    return true;
  }
  if (b.empty() && !at_end) return false;
  for (std::string_view m : {kFuncOpen, kParamOpen, kFuncClose, kToolClose})
    if (!at_end && m.substr(0, std::min(m.size(), b.size())) == b.substr(0, std::min(m.size(), b.size())))
      return false;  // the start of a tag: wait for the rest
  if (at_end) {
    close_function(d);
    buf_.clear();
    state_ = State::Content;
    return false;
  }
  // Stray text between the tags: not part of the call's JSON.
  const size_t next = b.find('<', 1);
  buf_.erase(0, next == std::string::npos ? buf_.size() : next);
  return true;
}

void ChatOutputParser::run(ChatDelta& d, bool at_end) {
  for (int guard = 0; guard < 1 << 20; guard++) {
    if (state_ == State::Start) {
      if (!o_.parse_reasoning || !o_.enable_thinking) {
        state_ = State::Content;
        continue;
      }
      const size_t s = skip_space(buf_);
      const std::string_view rest = std::string_view(buf_).substr(s);
      if (!at_end && kThinkOpen.substr(0, rest.size()) == rest && rest.size() < kThinkOpen.size()) return;
      if (starts_with(rest, kThinkOpen)) buf_.erase(0, s + kThinkOpen.size());
      state_ = State::Reasoning;
      saw_reasoning_ = true;
      continue;
    }
    bool progressed = false;
    if (state_ == State::Reasoning)
      progressed = step_reasoning(d, at_end);
    else if (state_ == State::Content)
      progressed = step_content(d, at_end);
    else
      progressed = step_tool_call(d, at_end);
    if (!progressed) {
      if (at_end && state_ == State::ToolCall) continue;  // step_tool_call moved to Content: flush it
      if (at_end && !buf_.empty()) continue;
      return;
    }
  }
  ZAYA_ASSERT(false, "chat output parser made no progress");  // every step consumes or waits
}

ChatDelta ChatOutputParser::feed(std::string_view text) {
  ChatDelta d;
  buf_.append(text);
  run(d, false);
  return d;
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta d;
  run(d, true);
  if (state_ == State::ToolCall) {  // cut short inside a call: close what is open
    if (in_parameter_) close_parameter(d, buf_);
    close_function(d);
    buf_.clear();
    state_ = State::Content;
  }
  return d;
}

ParsedChatOutput parse_chat_output(std::string_view text, const ChatOutputOptions& options) {
  ChatOutputParser p(options);
  p.feed(text);
  p.finish();
  ParsedChatOutput out;
  out.reasoning = p.reasoning();
  out.content = p.content();
  out.has_reasoning = p.saw_reasoning();
  out.tool_calls = p.tool_calls();
  return out;
}

}  // namespace zaya::serve
