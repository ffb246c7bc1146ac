// The assistant's generated text -> OpenAI message parts: reasoning, content and tool calls, in one pass and
// incrementally (streaming), with ZAYA1's conventions (docs/serving.md, "Chat conventions"):
//
//   reasoning   vLLM's `qwen3` reasoning parser, as ZAYA1 is served: with thinking on (the default) the text
//               before `</think>` is reasoning (a leading `<think>` is dropped), the rest content; no
//               `</think>` at the end = everything was reasoning (cut short). A `<zyphra_tool_call>` followed
//               by
//               `<function` also ends the reasoning. With enable_thinking=false the prompt already closed the
//               think block: everything is content.
//   tool calls  vLLM's `zaya_xml` parser's format: in the content,
//                 <zyphra_tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</zyphra_tool_call>
//               becomes {"id": "call_...", "type": "function", "function": {"name": NAME, "arguments":
//               JSON}}. VALUE (one leading and one trailing newline dropped) is typed by the tool's JSON
//               schema (properties.P.type): strings stay strings; integer -> int, number -> int or float,
//               boolean -> value == "true", object / array -> parsed JSON (or a Python literal), falling back
//               to the string; "null" is null whatever the type. Arguments are JSON with Python's separators
//               ({"a": 1, "b": "x"}), streamed per parameter: `{"a": 1`, `, "b": "x"`, `}`.
//
// Streaming never emits text that may still turn out to be part of a marker: a suffix that is a prefix of
// `</think>` or `<zyphra_tool_call>` is held back until the next feed() or finish().
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace zaya::serve {

struct ChatOutputOptions {
  bool enable_thinking = true;  // chat_template_kwargs.enable_thinking
  bool parse_reasoning = true;  // split off reasoning_content at all
  bool parse_tools = false;     // the request has tools and tool_choice is not "none"
  nlohmann::json tools;         // the request's `tools` (OpenAI format), for the parameters' types
  uint64_t id_seed = 0;         // tool-call ids "call_<24 hex>" come from this seed (0: random)
};

struct ToolCall {
  std::string id, name, arguments;  // arguments: a JSON object as text
};

// What one feed() / finish() adds. A tool call is announced once with its index, id and name (`started`),
// then its arguments arrive in pieces (concatenated they are the JSON object).
struct ChatDelta {
  std::string reasoning, content;
  struct Tool {
    int index = 0;
    bool started = false;  // first piece of this call: id and name are set
    std::string id, name, arguments;
  };
  std::vector<Tool> tools;
  bool empty() const { return reasoning.empty() && content.empty() && tools.empty(); }
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputOptions options);
  // New generated text (any split: bytes of a marker may arrive in different calls).
  ChatDelta feed(std::string_view text);
  // The end of generation: flushes what was held back and closes a tool call cut short.
  ChatDelta finish();

  // Everything so far (complete after finish()).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& tool_calls() const { return calls_; }
  bool saw_reasoning() const { return saw_reasoning_; }

 private:
  enum class State { Start, Reasoning, Content, ToolCall };
  void run(ChatDelta& d, bool at_end);
  bool step_reasoning(ChatDelta& d, bool at_end);
  bool step_content(ChatDelta& d, bool at_end);
  bool step_tool_call(ChatDelta& d, bool at_end);
  void emit_reasoning(ChatDelta& d, std::string_view s);
  void emit_content(ChatDelta& d, std::string_view s);
  void tool_piece(ChatDelta& d, const std::string& piece, bool start);
  void open_function(ChatDelta& d, const std::string& name);
  void close_parameter(ChatDelta& d, std::string value);
  void close_function(ChatDelta& d);
  std::string param_type(const std::string& param) const;
  std::string new_call_id();

  ChatOutputOptions o_;
  State state_ = State::Start;
  std::string buf_;  // text not yet consumed
  std::string reasoning_, content_;
  bool saw_reasoning_ = false;
  std::vector<ToolCall> calls_;
  // The tool call being parsed.
  bool in_function_ = false;   // after <function=NAME>
  bool in_parameter_ = false;  // after <parameter=P>
  bool after_call_ = false;    // a call just ended: the whitespace that follows is not content
  std::string param_name_;
  int params_in_call_ = 0;
  std::mt19937_64 rng_;
};

// A whole output at once (non-streaming responses).
struct ParsedChatOutput {
  std::string reasoning, content;
  bool has_reasoning = false;
  std::vector<ToolCall> tool_calls;
};
ParsedChatOutput parse_chat_output(std::string_view text, const ChatOutputOptions& options);

// Converts a parameter's raw text to its JSON value by the schema type (see the top of this file).
nlohmann::json convert_tool_parameter(const std::string& raw, const std::string& type);

}  // namespace zaya::serve
