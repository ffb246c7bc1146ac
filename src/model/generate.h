// Cached generation (spec §7): prefill the prompt (in chunks of `prefill_chunk` tokens, 0 = one call),
// then decode one token per call through the CCA cache.
#pragma once

#include <functional>
#include <vector>

#include "model/sampling.h"
#include "model/zaya.h"

namespace zaya {

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  SamplerConfig sampler;
  bool stop_at_eos = true;    // a row stops after producing one of the config's eos ids
  int64_t prefill_chunk = 0;  // > 0: chunked prefill
};

struct GenerateStats {
  double prefill_s = 0, decode_s = 0;
  int64_t prompt_tokens = 0, new_tokens = 0;
};

// prompt[B, S] (no padding). Returns the new tokens of each row. `on_token(row, id)` is called as each token
// is chosen (for streaming); `step_logits` (nullable) receives [B, steps, V] logits that chose each token.
std::vector<std::vector<int32_t>> generate(
    const ZayaModel& model, const int32_t* prompt, int64_t B, int64_t S, const GenerateOptions& opt,
    const std::function<void(int64_t row, int32_t id)>& on_token = nullptr,
    std::vector<float>* step_logits = nullptr, GenerateStats* stats = nullptr);

}  // namespace zaya
