// Fuzz target for the chat output parser (serve/chat_output.h): the generated text of an assistant turn,
// split into reasoning, content and ZAYA1 XML tool calls. Input: byte 0 chooses the options (bit 0
// enable_thinking, bit 1 parse_reasoning, bit 2 parse_tools), byte 1 how the text is cut into feed() calls
// (0: one byte at a time; otherwise pieces of 1-8 bytes from a generator seeded with it), the rest is the
// text. Properties (a violation aborts, which the driver reports as a crash):
//   - streaming equals the whole parse: the deltas add up to parse_chat_output()'s reasoning, content and
//     tool calls (names, ids, arguments), and to the parser's own totals;
//   - tool calls start once each, in order, and no piece belongs to a call not yet started;
//   - every call's arguments are a JSON object.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "serve/chat_output.h"

namespace {

using zaya::serve::ChatDelta;
using zaya::serve::ChatOutputOptions;
using zaya::serve::ChatOutputParser;
using zaya::serve::ParsedChatOutput;
using zaya::serve::ToolCall;

// The tools of tests/chat_output_test.cpp: every parameter type the parser converts.
const nlohmann::json& tools() {
  static const nlohmann::json t = nlohmann::json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "celsius": {"type": "boolean"},
    "lat": {"type": "number"}, "opts": {"type": "object"}, "tags": {"type": "array"},
    "limit": {"type": ["integer", "null"]}}}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
])");
  return t;
}

[[noreturn]] void violated(const char* what, const std::string& text) {
  std::fprintf(stderr, "chat_output_fuzz: %s\ntext (%zu bytes): %s\n", what, text.size(), text.c_str());
  std::abort();
}

const char* const kSeeds[] = {
    "\x07\x03<think>\nplan</think>\n\nHi <zyphra_tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
    "</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</zyphra_tool_call>\n<zyphra_tool_call>\n"
    "<function=now>\n</function>\n</zyphra_tool_call>",
    "\x06\x00</think><zyphra_tool_call>\n<function=get_weather>\n<parameter=opts>\n{\"a\": 1}\n</parameter>\n"
    "<parameter=tags>\n['x', 2]\n</parameter>\n<parameter=celsius>\ntrue\n</parameter>\n<parameter=lat>\n"
    "1e3\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n</function>\n</zyphra_tool_call> trailing",
    "\x03\x05no think end at all < / think </thin> <zyphra_tool",
    "\x07\x01<think></think><zyphra_tool_call>\n<function=get_weather>\n<parameter=city>\n<not a tag>\n",
};

}  // namespace

extern "C" size_t LLVMFuzzerSeedCount() {
  return sizeof(kSeeds) / sizeof(kSeeds[0]);
}
extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  const std::string_view s = kSeeds[i];
  // The second byte of a seed may be NUL: take the bytes up to the first NUL after it.
  const size_t end = std::string_view(kSeeds[i] + 2).size() + 2;
  return std::vector<uint8_t>(s.data(), s.data() + end);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ChatOutputOptions o;
  o.enable_thinking = data[0] & 1;
  o.parse_reasoning = data[0] & 2;
  o.parse_tools = data[0] & 4;
  o.tools = tools();
  o.id_seed = 7;  // the same call ids in both parses
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);

  const ParsedChatOutput whole = zaya::serve::parse_chat_output(text, o);

  ChatOutputParser p(o);
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  auto take = [&](const ChatDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (const ChatDelta::Tool& t : d.tools) {
      if (t.started) {
        if (t.index != int(calls.size())) violated("a tool call started out of order or twice", text);
        calls.push_back({t.id, t.name, ""});
      }
      if (t.index < 0 || t.index >= int(calls.size())) violated("a piece of a call not yet started", text);
      calls[size_t(t.index)].arguments += t.arguments;
    }
  };
  uint32_t state = data[1];
  size_t at = 0;
  while (at < text.size()) {
    state = state * 1664525u + 1013904223u;
    const size_t len = data[1] == 0 ? 1 : 1 + (state >> 24) % 8;
    take(p.feed(std::string_view(text).substr(at, len)));
    at += len;
  }
  take(p.finish());

  if (reasoning != whole.reasoning || p.reasoning() != reasoning)
    violated("streamed reasoning differs from the whole parse's", text);
  if (content != whole.content || p.content() != content)
    violated("streamed content differs from the whole parse's", text);
  if (p.saw_reasoning() != whole.has_reasoning) violated("has_reasoning differs", text);
  if (calls.size() != whole.tool_calls.size() || p.tool_calls().size() != calls.size())
    violated("streamed tool calls differ in number from the whole parse's", text);
  for (size_t k = 0; k < calls.size(); k++) {
    const ToolCall& w = whole.tool_calls[k];
    if (calls[k].name != w.name || calls[k].id != w.id || calls[k].arguments != w.arguments ||
        p.tool_calls()[k].arguments != calls[k].arguments)
      violated("a streamed tool call differs from the whole parse's", text);
    const nlohmann::json args = nlohmann::json::parse(w.arguments, nullptr, false);
    if (args.is_discarded() || !args.is_object()) violated("tool call arguments are not a JSON object", text);
  }
  return 0;
}
