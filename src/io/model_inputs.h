// INPUTS.json of `zaya forward` / `zaya generate` (the golden format,
// tests/data/golden/zaya1_like/inputs.json):
//   {"input_ids": [[...], ...], "targets": [[...]] (optional, -100 = ignored),
//    "attention_mask": [[1,0,...]] or null (optional),
//    "generation": {"prompt_ids": [[...]], "max_new_tokens": N} (optional)}
// Rows must have equal lengths (left-pad with attention_mask for ragged batches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

struct ModelInputs {
  int64_t B = 0, S = 0;
  std::vector<int32_t> input_ids;       // [B, S]
  std::vector<int32_t> targets;         // [B, S] or empty
  std::vector<int32_t> attention_mask;  // [B, S] or empty
  int64_t gen_B = 0, gen_S = 0;
  std::vector<int32_t> prompt_ids;  // [gen_B, gen_S] or empty
  int64_t max_new_tokens = 0;       // from generation.max_new_tokens, 0 when absent
};

// Throws zaya::Error naming the file and the field (ragged rows, non-integers, bad shapes).
ModelInputs load_model_inputs(const std::string& path);
ModelInputs parse_model_inputs(const std::string& json_text, const std::string& source);

}  // namespace zaya
