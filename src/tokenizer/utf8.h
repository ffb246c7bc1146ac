// UTF-8 helpers for the tokenizer: decoding one code point, appending one, repairing invalid input the
// WHATWG way (what JavaScript's TextDecoder and Rust's from_utf8_lossy do: each maximal invalid subpart
// becomes one U+FFFD), and finding where a byte stream stops being complete UTF-8 (for streaming).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

// Decodes the code point at s[i]. Returns its byte length (1..4) and stores it in *cp; on an invalid
// sequence returns the length of the maximal invalid subpart (>= 1) and stores U+FFFD.
int utf8_decode(std::string_view s, size_t i, uint32_t* cp);

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF, not a surrogate).
void utf8_append(std::string& out, uint32_t cp);

// True when s is entirely valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool utf8_is_valid(std::string_view s);

// s with every maximal invalid subpart replaced by U+FFFD (s itself when valid).
std::string utf8_repair(std::string_view s);

// The length of the longest prefix of s that does not end inside an incomplete (but so far valid)
// multi-byte sequence: bytes after it may still become a character once more bytes arrive.
size_t utf8_complete_prefix(std::string_view s);

// White space as JavaScript's \s and String.prototype.trim see it.
bool is_js_whitespace(uint32_t cp);

}  // namespace zaya
