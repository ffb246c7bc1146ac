// JSON parsing for untrusted files (safetensors headers, checkpoint indexes): nlohmann::json's parser
// plus a rejection of duplicate object keys, which nlohmann would otherwise resolve silently (last one
// wins) and which a hostile file could use to show different readers different tensors.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace zaya {

// Parses `size` bytes at `text` as one JSON value (surrounding whitespace allowed). Throws zaya::Error
// starting with `what` (e.g. "safetensors file 'x': header") when the text is not valid JSON or an
// object repeats a key. A NUL byte anywhere is invalid (nlohmann would stop reading there).
nlohmann::json parse_json_strict(const char* text, size_t size, const std::string& what);

// A short description of a JSON value's type for error messages: "a string", "an array", ...
std::string json_type_phrase(const nlohmann::json& v);

}  // namespace zaya
