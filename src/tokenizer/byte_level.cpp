#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {

// Printable bytes keep their own code point; the other 68 are numbered from U+0100 in byte order.
std::array<uint32_t, 256> make_byte_table() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? uint32_t(b) : next++;
  }
  return table;
}

const std::array<uint32_t, 256>& byte_table() {
  static const std::array<uint32_t, 256> table = make_byte_table();
  return table;
}

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass classify(uint32_t cp) {
  if (is_js_whitespace(cp)) return CharClass::kSpace;
  if (is_unicode_letter(cp)) return CharClass::kLetter;
  if (is_unicode_number(cp)) return CharClass::kNumber;
  return CharClass::kOther;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) {
  return byte_table()[b];
}

int code_point_to_byte(uint32_t cp) {
  // Byte code points are all below U+0100 + 68; invert the table once.
  static const std::array<int16_t, 256 + 68> inverse = [] {
    std::array<int16_t, 256 + 68> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; b++) inv[byte_table()[b]] = int16_t(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

void append_byte_level(std::string& out, std::string_view text) {
  for (char c : text) utf8_append(out, byte_to_code_point(uint8_t(c)));
}

std::vector<std::string_view> split_gpt2(std::string_view text) {
  // Decode once; offsets[i] is the byte offset of code point i (offsets[n] = text.size()).
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    int len = utf8_decode(text, i, &cp);
    cps.push_back(cp);
    offsets.push_back(i);
    i += size_t(len);
  }
  size_t n = cps.size();
  offsets.push_back(text.size());
  std::vector<CharClass> cls(n);
  for (size_t i = 0; i < n; i++) cls[i] = classify(cps[i]);

  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d  (lowercase only, like the pattern)
    if (cps[i] == '\'' && i + 1 < n) {
      uint32_t a = cps[i + 1], b = i + 2 < n ? cps[i + 2] : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd')
        end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        end = i + 3;
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional ASCII space, then a run of one class.
    if (end == i) {
      size_t start = (cps[i] == ' ' && i + 1 < n && cls[i + 1] != CharClass::kSpace) ? i + 1 : i;
      CharClass c = cls[start];
      if (c != CharClass::kSpace) {
        end = start + 1;
        while (end < n && cls[end] == c) end++;
      }
    }
    // '\s+(?!\S)' then '\s+': a whitespace run; when a non-space follows, leave the last space to it.
    if (end == i) {
      size_t run = i;
      while (run < n && cls[run] == CharClass::kSpace) run++;
      end = (run < n && run - i > 1) ? run - 1 : run;
    }
    pieces.push_back(text.substr(offsets[i], offsets[end] - offsets[i]));
    i = end;
  }
  return pieces;
}

}  // namespace zaya
