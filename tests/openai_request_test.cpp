// OpenAI request validation (src/serve/openai_request.h): the fields real clients send parse into the
// structs; every malformed or out-of-range field is a 400 with OpenAI's error object naming it; hostile
// bodies (any bytes, deep nesting, huge numbers) never escape as anything but RequestError.
#include "serve/openai_request.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

using namespace zaya::serve;
using nlohmann::json;

namespace {

// The body's RequestError: its status, param and a part of its message.
void expect_error(const std::string& body, bool chat, const std::string& param, const std::string& part) {
  try {
    if (chat)
      parse_chat_request(body);
    else
      parse_completion_request(body);
    ADD_FAILURE() << "accepted: " << body;
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << body << ": " << e.what();
    const json j = e.to_json();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["message"], e.what());
    EXPECT_TRUE(j["error"].contains("code"));
    EXPECT_EQ(j["error"]["param"], param.empty() ? json(nullptr) : json(param));
  }
}

}  // namespace

TEST(OpenAIRequest, ChatRequestAsTheOpenAIClientSendsIt) {
  const ChatRequest r = parse_chat_request(R"({
    "model": "zaya", "stream": true, "stream_options": {"include_usage": true},
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "max_completion_tokens": 64, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42,
    "stop": ["\n\n", "END"], "n": 2, "logprobs": true, "top_logprobs": 5, "logit_bias": {"106": -100},
    "chat_template_kwargs": {"enable_thinking": false}, "some_future_field": {"ignored": true}
  })");
  EXPECT_EQ(r.model, "zaya");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "Weather in Paris?");
  EXPECT_TRUE(r.messages[2].content_null);
  ASSERT_EQ(r.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_1");
  EXPECT_TRUE(r.stream.stream && r.stream.include_usage);
  EXPECT_EQ(r.sampling.max_tokens, 64);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.6);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_EQ(*r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 5);
  EXPECT_DOUBLE_EQ(r.sampling.logit_bias.at(106), -100);
  EXPECT_EQ(r.tool_choice, "function");
  EXPECT_EQ(r.tool_choice_function, "get_weather");
  EXPECT_FALSE(r.enable_thinking);
  EXPECT_EQ(r.tools.size(), 1u);
}

TEST(OpenAIRequest, DefaultsAndNulls) {
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "temperature": null, "max_tokens": null, "stop": "x"})");
  EXPECT_EQ(r.sampling.max_tokens, -1);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 1.0);
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.tool_choice, "auto");
  EXPECT_TRUE(r.enable_thinking);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_EQ(
      parse_chat_request(R"({"messages": [{"role": "user", "content": "a"}], "top_k": -1})").sampling.top_k,
      0);
}

TEST(OpenAIRequest, CompletionPrompts) {
  CompletionRequest r = parse_completion_request(R"({"model": "m", "prompt": "Once upon", "max_tokens": 0,
    "echo": true, "logprobs": 3})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once upon");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.sampling.max_tokens, 0);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 3);
  r = parse_completion_request(R"({"prompt": [2, 9259, 1902]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{2, 9259, 1902}));
  r = parse_completion_request(R"({"prompt": ["a", [5, 6], "b"]})");
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_TRUE(r.prompts[1].is_ids);
  EXPECT_EQ(r.prompts[2].text, "b");
}

TEST(OpenAIRequest, BadFieldsAreNamed) {
  const std::string msg = R"("messages": [{"role": "user", "content": "hi"}])";
  auto chat = [&](const std::string& extra) { return "{" + msg + extra + "}"; };
  expect_error("{not json", true, "", "not valid JSON");
  expect_error("[1, 2]", true, "", "must be a JSON object");
  expect_error("{}", true, "messages", "'messages' is required");
  expect_error(R"({"messages": []})", true, "messages", "non-empty array");
  expect_error(R"({"messages": [{"content": "x"}]})", true, "messages[0].role", "is required");
  expect_error(R"({"messages": [{"role": "robot", "content": "x"}]})", true, "messages[0].role", "'robot'");
  expect_error(R"({"messages": [{"role": "user"}]})", true, "messages[0].content", "is required");
  expect_error(R"({"messages": [{"role": "user", "content": 5}]})", true, "messages[0].content", "a number");
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
               true, "messages[0].content[0].type", "only text content parts");
  expect_error(chat(R"(, "temperature": 3)"), true, "temperature", "between 0 and 2, got 3");
  expect_error(chat(R"(, "temperature": "hot")"), true, "temperature", "must be a number, got a string");
  expect_error(chat(R"(, "top_p": 0)"), true, "top_p", "(0, 1]");
  expect_error(chat(R"(, "max_tokens": -5)"), true, "max_tokens", "between 0 and");
  expect_error(chat(R"(, "max_tokens": 1.5)"), true, "max_tokens", "must be an integer");
  expect_error(chat(R"(, "n": 0)"), true, "n", "between 1 and 16");
  expect_error(chat(R"(, "stop": [1])"), true, "stop", "'stop[0]' must be a string");
  expect_error(chat(R"(, "top_logprobs": 3)"), true, "top_logprobs", "needs 'logprobs': true");
  expect_error(chat(R"(, "logprobs": true, "top_logprobs": 21)"), true, "top_logprobs", "between 0 and 20");
  expect_error(chat(R"(, "logit_bias": {"abc": 1})"), true, "logit_bias", "token ids");
  expect_error(chat(R"(, "logit_bias": {"5": 101})"), true, "logit_bias", "between -100 and 100");
  expect_error(chat(R"(, "stream": "yes")"), true, "stream", "must be a boolean");
  expect_error(chat(R"(, "tools": [{"type": "function", "function": {}}])"), true, "tools[0].function.name",
               "is required");
  expect_error(chat(R"(, "tool_choice": "sometimes")"), true, "tool_choice", "'sometimes'");
  expect_error(chat(R"(, "tool_choice": "required")"), true, "tool_choice", "has no 'tools'");
  expect_error(
      chat(R"(, "tools": [{"function": {"name": "a"}}], "tool_choice": {"function": {"name": "b"}})"), true,
      "tool_choice.function.name", "'b', which is not in 'tools'");
  expect_error(chat(R"(, "response_format": {"type": "json_object"})"), true, "response_format",
               "not supported yet");
  expect_error(chat(R"(, "chat_template_kwargs": {"enable_thinking": "no"})"), true,
               "chat_template_kwargs.enable_thinking", "must be a boolean");
  expect_error(R"({"prompt": 5})", false, "prompt", "must be a string");
  expect_error(R"({"prompt": []})", false, "prompt", "an empty array");
  expect_error(R"({"prompt": [1, -2]})", false, "prompt", "non-negative integer token ids");
  expect_error(R"({"prompt": ["a", {}]})", false, "prompt[1]", "an object");
  expect_error(R"({"prompt": "x", "suffix": "y"})", false, "suffix", "not supported");
}

// Mutations of valid bodies and random bytes: only RequestError may come out.
TEST(OpenAIRequest, HostileBodiesOnlyRaiseRequestErrors) {
  const std::vector<std::string> seeds = {
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "tools": [{"type":
      "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": {"function": {"name": "f"}},
      "logit_bias": {"1": 2}, "stop": ["a"], "seed": 1, "n": 2, "logprobs": true, "top_logprobs": 2})",
      R"({"prompt": ["a", [1, 2]], "echo": true, "logprobs": 2, "max_tokens": 3, "stream_options": {}})"};
  std::mt19937 rng(5);
  int parsed = 0, rejected = 0;
  for (int k = 0; k < 20000; k++) {
    std::string s = seeds[k % 2];
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); e++) {
      const size_t at = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s[at] = "{}[]\":,0-9e.\\ nul"[rng() % 17];
          break;
        case 1:
          s.erase(at, 1 + rng() % 8);
          break;
        case 2:
          s.insert(at, std::string(1 + rng() % 4, char(rng() % 256)));
          break;
        default:
          s.insert(at, "[[[[[[[[[[1e999999]]]]]]]]]]");
          break;
      }
    }
    try {
      if (k % 2 == 0)
        parse_chat_request(s);
      else
        parse_completion_request(s);
      parsed++;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status, 400);
      rejected++;
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rejected, 1000);
  // Nesting far deeper than any request: still a clean error or a parse.
  std::string deep = R"({"messages": [{"role": "user", "content": "x"}], "tools": )" +
                     std::string(10000, '[') + std::string(10000, ']') + "}";
  EXPECT_THROW(parse_chat_request(deep), RequestError);
}
