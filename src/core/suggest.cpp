#include "core/suggest.h"

#include <algorithm>
#include <cctype>

namespace zaya {

namespace {

// Levenshtein distance of the lower-cased strings, one row at a time.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      const size_t up = row[j];
      const bool same = std::tolower((unsigned char)a[i - 1]) == std::tolower((unsigned char)b[j - 1]);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "lr" for "learning_rate": the first letters of the '_' / '-' separated parts.
std::string initials(const std::string& w) {
  std::string out;
  for (size_t i = 0; i < w.size(); i++)
    if (w[i] != '_' && w[i] != '-' && (i == 0 || w[i - 1] == '_' || w[i - 1] == '-'))
      out += char(std::tolower((unsigned char)w[i]));
  return out;
}

}  // namespace

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    // An abbreviation by initials ("lr" for "learning_rate") counts as one edit away.
    const size_t d = initials(word).size() > 1 && initials(word) == c ? 1 : edit_distance(word, c);
    if (d < best_d) best = c, best_d = d;
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& prefix) {
  const std::string n = nearest_name(word, candidates);
  return n.empty() ? "" : " (did you mean '" + prefix + n + "'?)";
}

}  // namespace zaya
