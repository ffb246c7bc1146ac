// OpenAI API response bodies and stream chunks, in the exact shapes the official clients parse
// (chat.completion, chat.completion.chunk, text_completion, list of models) and Server-Sent Events framing.
// Pure functions from plain structs to JSON: the server fills the structs, these decide the wire format.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace zaya::serve {

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose state came from the prompt cache
};
nlohmann::json usage_json(const Usage& u);

// One token's log-probability entry: the token's text, its logprob, and the most likely alternatives.
struct LogprobEntry {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // (token text, logprob), most likely first
};

// A tool call as the message carries it.
struct ToolCallOut {
  std::string id, name, arguments;
};

struct ChatChoice {
  int index = 0;
  std::optional<std::string> content;  // null when the answer is only tool calls
  std::string reasoning_content;       // omitted when empty
  std::vector<ToolCallOut> tool_calls;
  std::string finish_reason;  // stop | length | tool_calls
  std::optional<std::vector<LogprobEntry>> logprobs;
};

// {"id", "object": "chat.completion", "created", "model", "choices": [...], "usage"}
nlohmann::json chat_completion_json(const std::string& id, int64_t created, const std::string& model,
                                    const std::vector<ChatChoice>& choices, const Usage& usage);

// One streamed piece of a choice.
struct ChatChunkDelta {
  int index = 0;
  bool role = false;  // the first chunk of a choice carries "role": "assistant"
  std::optional<std::string> content, reasoning_content;
  struct Tool {
    int index = 0;
    std::string id, name;  // set on a call's first piece
    std::string arguments;
  };
  std::vector<Tool> tool_calls;
  std::optional<std::string> finish_reason;
  std::optional<std::vector<LogprobEntry>> logprobs;
};

// {"id", "object": "chat.completion.chunk", "created", "model", "choices": [{"index", "delta", "logprobs",
// "finish_reason"}]} (+ "usage": null when the client asked for usage: every chunk carries the key).
nlohmann::json chat_chunk_json(const std::string& id, int64_t created, const std::string& model,
                               const ChatChunkDelta& delta, bool usage_key);
// The last chunk when stream_options.include_usage: "choices": [] and the usage.
nlohmann::json chat_usage_chunk_json(const std::string& id, int64_t created, const std::string& model,
                                     const Usage& usage);

struct CompletionChoice {
  int index = 0;
  std::string text;
  std::string finish_reason;
  // Legacy completions logprobs: per token its text, logprob (null for the first echoed prompt token),
  // top alternatives and character offset into the returned text.
  struct Logprobs {
    std::vector<std::string> tokens;
    std::vector<std::optional<float>> token_logprobs;
    std::vector<std::vector<std::pair<std::string, float>>> top_logprobs;
    std::vector<int64_t> text_offset;
  };
  std::optional<Logprobs> logprobs;
};

// {"id", "object": "text_completion", "created", "model", "choices": [...], "usage"}; with usage == nullptr a
// stream chunk (no usage key unless usage_key, then null).
nlohmann::json completion_json(const std::string& id, int64_t created, const std::string& model,
                               const std::vector<CompletionChoice>& choices, const Usage* usage,
                               bool usage_key = false);

// GET /v1/models
nlohmann::json models_json(const std::string& model, int64_t created, int64_t max_model_len);

// Server-Sent Events framing: "data: <json>\n\n", and the end of a stream "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& j);
inline const char* sse_done() {
  return "data: [DONE]\n\n";
}

// The UTF-8 bytes of a token's text (OpenAI's "bytes" field: tokens may hold partial characters).
std::vector<int> utf8_bytes(const std::string& s);

}  // namespace zaya::serve
