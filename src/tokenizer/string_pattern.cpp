#include "tokenizer/string_pattern.h"

#include "core/error.h"

namespace zaya {

std::string parse_string_pattern(const JsonField& pattern) {
  if (!pattern.raw().is_object())
    pattern.fail(str_cat("expected {\"String\": ...}, got ", pattern.type_name()));
  if (pattern.find("Regex")) {
    pattern.fail("Regex patterns are not supported (only literal {\"String\": ...} patterns)");
  }
  std::string s = pattern.at("String").str();
  if (s.empty()) pattern.fail("the String pattern must not be empty");
  return s;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.data() + pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.data() + pos, text.size() - pos);
  return out;
}

}  // namespace zaya
