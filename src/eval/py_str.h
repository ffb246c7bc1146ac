// The few Python str methods lm-eval's task code applies to text, on UTF-8 strings: strip/rstrip
// (str.isspace whitespace, including the Unicode spaces), len (code points) and capitalize (ASCII letters
// only: other letters are left as they are, where Python would also case them).
#pragma once

#include <cstdint>
#include <string>

namespace zaya::eval {

// Python's str.strip() / str.rstrip(): whitespace as str.isspace() defines it (ASCII " \t\n\v\f\r",
// \x1c-\x1f, and U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
std::string python_strip(const std::string& text);
std::string python_rstrip(const std::string& text);
// Python's len(): the code points of a UTF-8 string (continuation bytes do not count).
int64_t python_len(const std::string& text);
// Python's str.capitalize() on ASCII letters: the first upper case, the rest lower case.
std::string python_capitalize(const std::string& text);

}  // namespace zaya::eval
