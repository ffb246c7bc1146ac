// OpenAI API request bodies -> validated structs (`POST /v1/chat/completions`, `POST /v1/completions`).
// Every field is checked for type and range; a bad one is a RequestError carrying OpenAI's error object
// ({"error": {"message", "type", "param", "code"}}, HTTP 400) that names the field and what was expected.
// Unknown fields are ignored, as OpenAI's and vLLM's servers do. What is parsed here is only the request:
// the server checks the model name, the context length and the queue.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace zaya::serve {

// An error that becomes an HTTP status and OpenAI's error object.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, std::string message, std::string param = "", std::string type = "",
               std::string code = "");
  int status;
  std::string param, type, code;
  nlohmann::json to_json() const;  // {"error": {"message", "type", "param", "code"}}
};

// How tokens are chosen and when generation stops (shared by chat and completions).
struct SamplingParams {
  int64_t max_tokens = -1;        // -1: until the context is full or a stop condition
  double temperature = 1.0;       // 0 = greedy
  double top_p = 1.0;             // 1 = off
  int64_t top_k = 0;              // 0 or -1 = off
  double min_p = 0.0;             // 0 = off
  double presence_penalty = 0.0;  // OpenAI's additive penalties, [-2, 2]
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;  // the multiplicative one (CTRL / HF), > 0; 1 = off
  std::optional<uint64_t> seed;     // absent: a fresh random seed per request
  std::vector<std::string> stop;    // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int n = 1;                                // choices per request
  bool logprobs = false;                    // return the chosen token's log-probability
  int top_logprobs = 0;                     // and the k most likely alternatives, 0-20
  std::map<int32_t, double> logit_bias;     // token id -> bias in [-100, 100]
  bool return_tokens_as_token_ids = false;  // logprobs name tokens "token_id:N" (vLLM's extension)
};

struct StreamOptions {
  bool stream = false;
  bool include_usage = false;
};

// One message of `messages`: content as a string (text parts are joined), tool calls of an assistant turn
// (arguments as a JSON string, as OpenAI sends them), the id a tool turn answers.
struct ChatMessage {
  std::string role;  // system | developer | user | assistant | tool
  std::string content;
  bool content_null = false;  // an assistant turn with only tool calls
  std::string name;
  std::string reasoning_content;  // an earlier assistant turn's reasoning, when the client sends it back
  struct ToolCallIn {
    std::string id, name, arguments;
  };
  std::vector<ToolCallIn> tool_calls;
  std::string tool_call_id;
  nlohmann::json raw;  // the message as sent (templates may read fields not modelled here)
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  SamplingParams sampling;
  StreamOptions stream;
  nlohmann::json tools =
      nlohmann::json::array();       // as sent, validated: [{"type": "function", "function": {...}}]
  std::string tool_choice = "auto";  // none | auto | required | function
  std::string tool_choice_function;  // the name when tool_choice is "function"
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  bool enable_thinking = true;  // chat_template_kwargs.enable_thinking
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

struct CompletionRequest {
  std::string model;
  // One or more prompts, each text or token ids.
  struct Prompt {
    std::string text;
    std::vector<int32_t> ids;
    bool is_ids = false;
  };
  std::vector<Prompt> prompts;
  SamplingParams sampling;
  StreamOptions stream;
  bool echo = false;
  std::string suffix;
};

// Parses and validates a body. Throws RequestError (400) naming the field; malformed JSON is also a 400.
ChatRequest parse_chat_request(const std::string& body);
CompletionRequest parse_completion_request(const std::string& body);

}  // namespace zaya::serve
