// Fuzzes the OpenAI request parser (src/serve/openai_request.h), the first code an HTTP body reaches: any
// input must parse or raise RequestError; nothing else may escape and nothing may crash.
#include <cstdint>
#include <string>
#include <vector>

#include "serve/openai_request.h"

namespace {
const char* kSeeds[] = {
    R"({"model":"zaya","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text",
"text":"hi"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f",
"arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":
{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"auto",
"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":8,"temperature":0.6,"top_p":0.9,
"top_k":20,"min_p":0.1,"seed":3,"stop":["x"],"n":1,"logprobs":true,"top_logprobs":2,"logit_bias":{"5":-1},
"chat_template_kwargs":{"enable_thinking":false}})",
    R"({"model":"zaya","prompt":["a",[1,2,3]],"max_tokens":0,"echo":true,"logprobs":1,"stop_token_ids":[106]})",
};
}  // namespace

extern "C" size_t LLVMFuzzerSeedCount() {
  return sizeof(kSeeds) / sizeof(kSeeds[0]);
}
extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  std::string s = kSeeds[i];
  return std::vector<uint8_t>(s.begin(), s.end());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    zaya::serve::parse_chat_request(body);
  } catch (const zaya::serve::RequestError&) {
  }
  try {
    zaya::serve::parse_completion_request(body);
  } catch (const zaya::serve::RequestError&) {
  }
  return 0;
}
