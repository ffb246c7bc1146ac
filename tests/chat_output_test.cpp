// The chat output parser (src/serve/chat_output.h): reasoning split as vLLM's qwen3 parser does it, ZAYA1's
// XML tool calls as vLLM's zaya_xml parser types them, and streaming: any split of the text into feed() calls
// gives the same reasoning, content and tool calls as one whole parse, with nothing emitted that later turns
// out to be part of a marker.
#include "serve/chat_output.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

using namespace zaya::serve;
using nlohmann::json;

namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "celsius": {"type": "boolean"},
    "lat": {"type": "number"}, "opts": {"type": "object"}, "tags": {"type": "array"},
    "limit": {"type": ["integer", "null"]}}}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
])");

ChatOutputOptions tool_options(bool thinking = true) {
  ChatOutputOptions o;
  o.enable_thinking = thinking;
  o.parse_tools = true;
  o.tools = kTools;
  o.id_seed = 7;
  return o;
}

std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<zyphra_tool_call>\n<function=" + name + ">\n";
  for (const auto& [p, v] : params) s += "<parameter=" + p + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</zyphra_tool_call>";
}

// Feeds `text` in pieces cut at `cuts` and returns what the deltas add up to; checks the delta invariants.
ParsedChatOutput stream(const std::string& text, const std::vector<size_t>& cuts,
                        const ChatOutputOptions& o) {
  ChatOutputParser p(o);
  ParsedChatOutput out;
  std::vector<ToolCall> calls;
  auto take = [&](const ChatDelta& d) {
    out.reasoning += d.reasoning;
    out.content += d.content;
    for (const ChatDelta::Tool& t : d.tools) {
      if (t.started) {
        EXPECT_EQ(t.index, int(calls.size())) << "calls start in order, once each";
        calls.push_back({t.id, t.name, ""});
      }
      EXPECT_LT(t.index, int(calls.size())) << "a piece of a call that was not started";
      if (t.index < int(calls.size())) calls[t.index].arguments += t.arguments;
    }
  };
  size_t at = 0;
  for (size_t c : cuts) {
    take(p.feed(std::string_view(text).substr(at, c - at)));
    at = c;
  }
  take(p.feed(std::string_view(text).substr(at)));
  take(p.finish());
  out.has_reasoning = p.saw_reasoning();
  out.tool_calls = calls;
  // The parser's own totals agree with the deltas.
  EXPECT_EQ(p.reasoning(), out.reasoning);
  EXPECT_EQ(p.content(), out.content);
  EXPECT_EQ(p.tool_calls().size(), calls.size());
  for (size_t k = 0; k < calls.size() && k < p.tool_calls().size(); k++)
    EXPECT_EQ(p.tool_calls()[k].arguments, calls[k].arguments);
  return out;
}

void expect_same(const ParsedChatOutput& a, const ParsedChatOutput& b, const std::string& what) {
  EXPECT_EQ(a.reasoning, b.reasoning) << what;
  EXPECT_EQ(a.content, b.content) << what;
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << what;
  for (size_t k = 0; k < a.tool_calls.size(); k++) {
    EXPECT_EQ(a.tool_calls[k].name, b.tool_calls[k].name) << what;
    EXPECT_EQ(a.tool_calls[k].arguments, b.tool_calls[k].arguments) << what;
  }
}

}  // namespace

TEST(ChatOutput, ReasoningSplitsAtThinkEnd) {
  ChatOutputOptions o;
  ParsedChatOutput r = parse_chat_output("<think>\nLet me think.\n</think>\n\nThe answer is 4.", o);
  EXPECT_TRUE(r.has_reasoning);
  EXPECT_EQ(r.reasoning, "\nLet me think.\n");
  EXPECT_EQ(r.content, "\n\nThe answer is 4.");
  // The template already opened the think block: only </think> in the output.
  r = parse_chat_output("thinking</think>done", o);
  EXPECT_EQ(r.reasoning, "thinking");
  EXPECT_EQ(r.content, "done");
  // No </think>: cut short while thinking, everything is reasoning.
  r = parse_chat_output("<think>still going", o);
  EXPECT_EQ(r.reasoning, "still going");
  EXPECT_EQ(r.content, "");
}

TEST(ChatOutput, ThinkingOffIsAllContent) {
  ChatOutputOptions o;
  o.enable_thinking = false;
  ParsedChatOutput r = parse_chat_output("Hello </think> there", o);
  EXPECT_FALSE(r.has_reasoning);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hello </think> there");
  o.enable_thinking = true;
  o.parse_reasoning = false;  // no reasoning parser configured
  EXPECT_EQ(parse_chat_output("<think>a</think>b", o).content, "<think>a</think>b");
}

TEST(ChatOutput, ToolCallsAreTypedByTheSchema) {
  const std::string text = "</think>\n\nLet me look.\n" +
                           call("get_weather", {{"city", "Paris, France"},
                                                {"days", "3"},
                                                {"celsius", "True"},
                                                {"lat", "48.85"},
                                                {"opts", "{\"units\": \"metric\", \"n\": [1, 2]}"},
                                                {"tags", "['a', \"b\", True, None, (1, 2.5)]"},
                                                {"limit", "null"}}) +
                           "\n" + call("now", {}) + "\n";
  ParsedChatOutput r = parse_chat_output(text, tool_options());
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "\n\nLet me look.\n");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(
      r.tool_calls[0].arguments,
      R"({"city": "Paris, France", "days": 3, "celsius": true, "lat": 48.85, )"
      R"("opts": {"n": [1, 2], "units": "metric"}, "tags": ["a", "b", true, null, [1, 2.5]], "limit": null})");
  EXPECT_EQ(r.tool_calls[1].name, "now");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.tool_calls[0].id.size(), 5u + 24u);
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
  // Every argument string is valid JSON.
  for (const ToolCall& c : r.tool_calls)
    EXPECT_FALSE(json::parse(c.arguments, nullptr, false).is_discarded());
}

TEST(ChatOutput, ParameterConversionFollowsTheZayaXmlParser) {
  EXPECT_EQ(convert_tool_parameter("42", "integer"), json(42));
  EXPECT_EQ(convert_tool_parameter(" -7 ", "int"), json(-7));
  EXPECT_EQ(convert_tool_parameter("1_000", "integer"), json(1000));
  EXPECT_EQ(convert_tool_parameter("4.5", "integer"), json("4.5"));  // not an int: stays a string
  EXPECT_EQ(convert_tool_parameter("4.0", "number"), json(4));       // integral numbers become ints
  EXPECT_EQ(convert_tool_parameter("2.5", "number"), json(2.5));
  EXPECT_EQ(convert_tool_parameter("abc", "number"), json("abc"));
  EXPECT_EQ(convert_tool_parameter("TRUE", "boolean"), json(true));
  EXPECT_EQ(convert_tool_parameter("yes", "boolean"), json(false));
  EXPECT_EQ(convert_tool_parameter("Null", "string"), json(nullptr));
  EXPECT_EQ(convert_tool_parameter("{'a': (1,)}", "object"), json::parse(R"({"a": [1]})"));
  EXPECT_EQ(convert_tool_parameter("{broken", "object"), json("{broken"));
  EXPECT_EQ(convert_tool_parameter("x", "mystery"), json("x"));  // unknown types are strings
  EXPECT_EQ(convert_tool_parameter("  spaced  ", "string"), json("  spaced  "));
}

// A tool call inside the reasoning ends it (the model forgot </think>), as vLLM's qwen3 parser treats it; a
// mention of the tag that does not open a function stays reasoning.
TEST(ChatOutput, ToolCallEndsReasoning) {
  ParsedChatOutput r = parse_chat_output("I should call it." + call("now", {}), tool_options());
  EXPECT_EQ(r.reasoning, "I should call it.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "now");
  r = parse_chat_output("The <zyphra_tool_call> tag is how I call tools.</think>ok", tool_options());
  EXPECT_EQ(r.reasoning, "The <zyphra_tool_call> tag is how I call tools.");
  EXPECT_EQ(r.content, "ok");
  EXPECT_TRUE(r.tool_calls.empty());
  // Without tools in the request the tags are plain content.
  ChatOutputOptions o;
  o.enable_thinking = false;
  EXPECT_EQ(parse_chat_output(call("now", {}), o).content, call("now", {}));
}

TEST(ChatOutput, CutShortInsideACallClosesIt) {
  ParsedChatOutput r = parse_chat_output("<zyphra_tool_call>\n<function=get_weather>\n<parameter=city>\nRome",
                                         tool_options(false));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Rome"})");
  // A missing </parameter> before </function>.
  r = parse_chat_output(
      "<zyphra_tool_call><function=get_weather><parameter=days>5</function></zyphra_tool_call>",
      tool_options(false));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"days": 5})");
}

// Every split of these outputs into two or three pieces, and one byte at a time, gives the whole parse.
TEST(ChatOutput, StreamingEqualsTheWholeParse) {
  const std::vector<std::string> texts = {
      "<think>\nplan</think>\n\nHi " + call("get_weather", {{"city", "Oslo"}, {"days", "2"}}) + "\n" +
          call("now", {}),
      "no think end at all < / think",
      "</think>a < b and c </thin> d",
      "</think>" + call("get_weather", {{"opts", "{\"a\": 1}"}}) + " trailing text",
      "<think></think>" + call("get_weather", {{"city", "<not a tag>"}}),
  };
  int checked = 0;
  for (bool thinking : {true, false}) {
    for (const std::string& t : texts) {
      const ChatOutputOptions o = tool_options(thinking);
      const ParsedChatOutput whole = parse_chat_output(t, o);
      std::vector<size_t> bytes;
      for (size_t k = 1; k < t.size(); k++) bytes.push_back(k);
      expect_same(stream(t, bytes, o), whole, "byte by byte: " + t);
      for (size_t a = 1; a < t.size(); a++) {
        expect_same(stream(t, {a}, o), whole, "cut at " + std::to_string(a) + ": " + t);
        checked++;
      }
    }
  }
  std::mt19937 rng(3);
  for (int k = 0; k < 200; k++) {
    const std::string& t = texts[k % texts.size()];
    std::vector<size_t> cuts;
    for (size_t a = 1; a < t.size(); a++)
      if (rng() % 5 == 0) cuts.push_back(a);
    expect_same(stream(t, cuts, tool_options()), parse_chat_output(t, tool_options()), "random cuts: " + t);
    checked++;
  }
  EXPECT_GT(checked, 500);
}

// Nothing that could still be a marker is emitted early: after feeding "Hi <zyphra_tool" no content beyond
// "Hi " has been given out.
TEST(ChatOutput, MarkerPrefixesAreHeldBack) {
  ChatOutputParser p(tool_options(false));
  ChatDelta d = p.feed("Hi <zyphra_tool");
  EXPECT_EQ(d.content, "Hi ");
  d = p.feed("_call>\n<function=now>\n</function>\n</zyphra_tool_call>");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tools.size(), 1u);
  EXPECT_TRUE(d.tools[0].started);
  EXPECT_EQ(d.tools[0].name, "now");
  EXPECT_EQ(d.tools[0].arguments, "{}");
  ChatOutputParser q{ChatOutputOptions{}};
  d = q.feed("ab</thi");
  EXPECT_EQ(d.reasoning, "ab");
  d = q.feed("nk>cd");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "cd");
}

// Random bytes and random tag soup in random pieces never throw and always end in a valid state.
TEST(ChatOutput, ArbitraryTextNeverBreaksTheParser) {
  const std::vector<std::string> atoms = {"<zyphra_tool_call>",
                                          "</zyphra_tool_call>",
                                          "<function=",
                                          "</function>",
                                          "<parameter=",
                                          "</parameter>",
                                          "<think>",
                                          "</think>",
                                          ">",
                                          "<",
                                          "\n",
                                          "x",
                                          "days",
                                          "3",
                                          "{'a'",
                                          " "};
  std::mt19937 rng(11);
  for (int k = 0; k < 2000; k++) {
    std::string t;
    const int n = int(rng() % 30);
    for (int a = 0; a < n; a++)
      t += rng() % 8 ? atoms[rng() % atoms.size()] : std::string(1, char(rng() % 256));
    ChatOutputParser p(tool_options(k % 2 == 0));
    size_t at = 0;
    while (at < t.size()) {
      const size_t len = 1 + rng() % 7;
      p.feed(std::string_view(t).substr(at, len));
      at += len;
    }
    p.finish();
    for (const ToolCall& c : p.tool_calls())
      EXPECT_FALSE(json::parse(c.arguments, nullptr, false).is_discarded()) << c.arguments << " from " << t;
  }
}
