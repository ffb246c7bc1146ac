// The literal-string patterns of tokenizer.json ({"String": " "}) shared by the Replace normalizer, the
// Split pre-tokenizer and the Replace decoder. Regex patterns are rejected with a clear error: the
// supported tokenizers (Gemma 3, byte-level BPE) only use literal ones.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/json_field.h"

namespace zaya {

// Reads {"String": "..."} (non-empty) from a pattern field; throws for {"Regex": ...} and anything else.
std::string parse_string_pattern(const JsonField& pattern);

// Replaces every non-overlapping occurrence of from (non-empty), scanning left to right.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace zaya
