#include "tokenizer/utf8.h"

namespace zaya {
namespace {

// For a lead byte: how many continuation bytes follow and the allowed range of the first one
// (WHATWG / Unicode Table 3-7: this excludes overlongs, surrogates and code points above U+10FFFF).
struct LeadInfo {
  int need;  // continuation bytes; -1 for a byte that can never start a character
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

// Number of bytes of s[i..] that form a valid (possibly incomplete) prefix of one character, and
// whether the character is complete.
int valid_prefix(std::string_view s, size_t i, bool* complete) {
  LeadInfo info = lead_info(uint8_t(s[i]));
  *complete = false;
  if (info.need < 0) return 0;
  if (info.need == 0) {
    *complete = true;
    return 1;
  }
  int len = 1;
  for (int k = 0; k < info.need; k++) {
    if (i + len >= s.size()) return len;
    uint8_t c = uint8_t(s[i + len]);
    uint8_t lo = k == 0 ? info.lo : 0x80, hi = k == 0 ? info.hi : 0xBF;
    if (c < lo || c > hi) return len;
    len++;
  }
  *complete = true;
  return len;
}

}  // namespace

int utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  uint8_t b = uint8_t(s[i]);
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  bool complete;
  int len = valid_prefix(s, i, &complete);
  if (!complete) {
    *cp = 0xFFFD;
    return len > 0 ? len : 1;
  }
  uint32_t v = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int k = 1; k < len; k++) v = (v << 6) | (uint8_t(s[i + k]) & 0x3F);
  *cp = v;
  return len;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {  // ASCII fast path
      i++;
      continue;
    }
    bool complete;
    int len = valid_prefix(s, i, &complete);
    if (!complete) return false;
    i += size_t(len);
  }
  return true;
}

std::string utf8_repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    bool complete;
    int len = valid_prefix(s, i, &complete);
    if (complete) {
      out.append(s.data() + i, size_t(len));
    } else {
      utf8_append(out, 0xFFFD);
      if (len == 0) len = 1;
    }
    i += size_t(len);
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // A pending sequence starts at a lead byte among the last three bytes (a lead byte always starts a
  // new decoding attempt, even right after a broken sequence).
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    size_t j = n - back;
    LeadInfo info = lead_info(uint8_t(s[j]));
    if (info.need <= 0) continue;
    bool complete;
    int len = valid_prefix(s, j, &complete);
    if (!complete && j + size_t(len) == n) return j;  // valid so far and cut by the end
    return n;
  }
  return n;
}

bool is_js_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

}  // namespace zaya
