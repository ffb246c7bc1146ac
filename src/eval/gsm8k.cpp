#include "eval/gsm8k.h"

#include <regex>

#include "eval/py_str.h"

namespace zaya::eval {

namespace {

const char* const kInvalid = "[invalid]";

std::string remove_all(const std::string& text, char c) {
  std::string out;
  for (char x : text)
    if (x != c) out += x;
  return out;
}

}  // namespace

std::string truncate_at_stop_sequences(const std::string& generation, const std::vector<std::string>& until) {
  size_t cut = generation.size();
  for (const std::string& stop : until) {
    if (stop.empty()) continue;
    const size_t at = generation.find(stop);
    if (at != std::string::npos && at < cut) cut = at;
  }
  return generation.substr(0, cut);
}

std::string gsm8k_strict_match(const std::string& response) {
  static const std::regex pattern(R"(#### (\-?[0-9\.\,]+))");
  std::smatch m;
  if (!std::regex_search(response, m, pattern)) return kInvalid;
  return python_strip(m[1].str());
}

std::string gsm8k_flexible_extract(const std::string& response) {
  static const std::regex pattern(R"((-?[$0-9.,]{2,})|(-?[0-9]+))");
  std::string last;
  bool found = false;
  for (auto it = std::sregex_iterator(response.begin(), response.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    // re.findall with two groups gives (g1, g2) tuples; the filter keeps the first non-empty one.
    const std::smatch& m = *it;
    last = m[1].matched && m[1].length() > 0 ? m[1].str() : m[2].str();
    found = true;
  }
  if (!found || last.empty()) return kInvalid;
  return python_strip(last);
}

std::string gsm8k_normalize(const std::string& text) {
  std::string t = remove_all(remove_all(text, ','), '$');
  const size_t marker = t.rfind("#### ");
  if (marker != std::string::npos) t = t.substr(marker + 5);
  if (!t.empty() && t.back() == '.') {
    t.pop_back();
  } else if (t.size() >= 2 && t[t.size() - 1] == '\n' && t[t.size() - 2] == '.') {
    t.erase(t.size() - 2, 1);
  }
  for (char& c : t)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return t;
}

double gsm8k_exact_match(const std::string& prediction, const std::string& reference) {
  return gsm8k_normalize(prediction) == gsm8k_normalize(reference) ? 1.0 : 0.0;
}

}  // namespace zaya::eval
