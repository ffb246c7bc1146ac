#include "eval/py_str.h"

namespace zaya::eval {

namespace {

// The byte length of the whitespace character that starts at `i` (0 when none).
size_t space_at(const std::string& s, size_t i) {
  const unsigned char c = (unsigned char)s[i];
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
  auto byte = [&](size_t k) { return i + k < s.size() ? (unsigned char)s[i + k] : 0; };
  if (c == 0xC2 && (byte(1) == 0x85 || byte(1) == 0xA0)) return 2;  // U+0085, U+00A0
  if (c == 0xE1 && byte(1) == 0x9A && byte(2) == 0x80) return 3;    // U+1680
  if (c == 0xE2 && byte(1) == 0x80) {                               // U+2000-200A, 2028, 2029, 202F
    const unsigned b = byte(2);
    if ((b >= 0x80 && b <= 0x8A) || b == 0xA8 || b == 0xA9 || b == 0xAF) return 3;
  }
  if (c == 0xE2 && byte(1) == 0x81 && byte(2) == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  return 0;
}

// The start of the trailing run of whitespace characters.
size_t trailing_space_start(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;  // back to the first byte of the last character
    while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80 && end - start < 4) start--;
    if (space_at(s, start) != end - start) break;
    end = start;
  }
  return end;
}

}  // namespace

std::string python_rstrip(const std::string& text) {
  return text.substr(0, trailing_space_start(text));
}

std::string python_strip(const std::string& text) {
  size_t begin = 0;
  for (size_t n; begin < text.size() && (n = space_at(text, begin)) > 0;) begin += n;
  if (begin == text.size()) return "";
  return text.substr(begin, trailing_space_start(text) - begin);
}

int64_t python_len(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text)
    if ((c & 0xC0) != 0x80) n++;
  return n;
}

std::string python_capitalize(const std::string& text) {
  std::string out = text;
  for (size_t i = 0; i < out.size(); i++) {
    const char c = out[i];
    if (i == 0 && c >= 'a' && c <= 'z') out[i] = char(c - 'a' + 'A');
    if (i > 0 && c >= 'A' && c <= 'Z') out[i] = char(c - 'A' + 'a');
  }
  return out;
}

}  // namespace zaya::eval
