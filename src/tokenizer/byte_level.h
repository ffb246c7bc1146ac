// The GPT-2 byte-level scheme: every byte maps to one printable code point (so byte-level BPE vocabularies
// are plain strings), and the GPT-2 split pattern that cuts text into words before BPE:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

// The code point byte b is written as (GPT-2's bytes_to_unicode).
uint32_t byte_to_code_point(uint8_t b);
// The byte a code point stands for, or -1 when cp is not one of the 256 byte code points.
int code_point_to_byte(uint32_t cp);

// Appends text with every byte replaced by its code point (UTF-8 encoded).
void append_byte_level(std::string& out, std::string_view text);

// Splits text (valid UTF-8) with the GPT-2 pattern; the pieces cover the text exactly, in order.
std::vector<std::string_view> split_gpt2(std::string_view text);

}  // namespace zaya
