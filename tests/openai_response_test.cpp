// OpenAI response shapes (src/serve/openai_response.h): the keys and value types the official clients
// read, for full responses, stream chunks (first, tool-call pieces, last, the usage chunk) and SSE framing.
#include "serve/openai_response.h"

#include <gtest/gtest.h>

using namespace zaya::serve;
using nlohmann::json;

TEST(OpenAIResponse, ChatCompletion) {
  ChatChoice c;
  c.content = "Paris.";
  c.reasoning_content = "The capital.";
  c.finish_reason = "stop";
  c.logprobs = std::vector<LogprobEntry>{{"Par", -0.1f, {{"Par", -0.1f}, {"Lon", -2.5f}}}};
  ChatChoice t;
  t.index = 1;
  t.tool_calls = {{"call_1", "get_weather", R"({"city": "Paris"})"}};
  t.finish_reason = "tool_calls";
  const json j = chat_completion_json("chatcmpl-1", 1700000000, "zaya", {c, t}, {12, 5, 4});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "The capital.");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "Par");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], json({80, 97, 114}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "Lon");
  EXPECT_TRUE(j["choices"][1]["message"]["content"].is_null());
  EXPECT_FALSE(j["choices"][1]["message"].contains("reasoning_content"));
  EXPECT_EQ(j["choices"][1]["message"]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["choices"][1]["message"]["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris"})");
  EXPECT_TRUE(j["choices"][1]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][1]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
                                        "prompt_tokens_details": {"cached_tokens": 4}})"));
}

TEST(OpenAIResponse, ChatStreamChunks) {
  ChatChunkDelta first;
  first.role = true;
  first.content = "";
  json j = chat_chunk_json("chatcmpl-1", 1, "zaya", first, true);
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());
  ChatChunkDelta tool;
  tool.tool_calls = {{0, "call_1", "f", "{\"a\": 1"}, {1, "", "", "}"}};
  j = chat_chunk_json("chatcmpl-1", 1, "zaya", tool, false);
  EXPECT_FALSE(j.contains("usage"));
  const json& calls = j["choices"][0]["delta"]["tool_calls"];
  EXPECT_EQ(calls[0], json::parse(R"({"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "f", "arguments": "{\"a\": 1"}})"));
  EXPECT_EQ(calls[1], json::parse(R"({"index": 1, "function": {"arguments": "}"}})"));
  ChatChunkDelta last;
  last.finish_reason = "length";
  j = chat_chunk_json("chatcmpl-1", 1, "zaya", last, false);
  EXPECT_EQ(j["choices"][0]["delta"], json::object());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  j = chat_usage_chunk_json("chatcmpl-1", 1, "zaya", {3, 2, 0});
  EXPECT_EQ(j["choices"], json::array());
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

TEST(OpenAIResponse, CompletionsAndModels) {
  CompletionChoice c;
  c.text = "Once upon a time";
  c.finish_reason = "length";
  CompletionChoice::Logprobs lp;
  lp.tokens = {"Once", " upon"};
  lp.token_logprobs = {std::nullopt, -1.5f};
  lp.top_logprobs = {{}, {{" upon", -1.5f}, {" more", -2.0f}}};
  lp.text_offset = {0, 4};
  c.logprobs = lp;
  const Usage u{2, 1, 0};
  json j = completion_json("cmpl-1", 2, "zaya", {c}, &u);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "Once upon a time");
  EXPECT_TRUE(j["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
  EXPECT_TRUE(j["choices"][0]["logprobs"]["top_logprobs"][0].is_null());
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1][" more"], -2.0);
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json({0, 4}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  CompletionChoice piece;
  piece.text = "x";
  j = completion_json("cmpl-1", 2, "zaya", {piece}, nullptr, true);
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j["usage"].is_null());
  j = models_json("zaya", 3, 4096);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "zaya");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["max_model_len"], 4096);
}

TEST(OpenAIResponse, SseFramingSurvivesInvalidUtf8) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_STREQ(sse_done(), "data: [DONE]\n\n");
  // A token that ends inside a multi-byte character.
  ChatChunkDelta d;
  d.content = std::string("caf\xC3", 4);
  const std::string e = sse_event(chat_chunk_json("id", 1, "m", d, false));
  EXPECT_NE(e.find("caf\xEF\xBF\xBD"), std::string::npos) << e;  // U+FFFD
  EXPECT_EQ(utf8_bytes(std::string("\xC3", 1)), std::vector<int>{195});
}
