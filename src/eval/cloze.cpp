#include "eval/cloze.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"

namespace zaya::eval {

namespace {

bool is_candidate(const std::string& w) {
  if (w.size() < 2) return false;
  for (unsigned char c : w)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
  return true;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::vector<nlohmann::json> build_cloze_items(const std::vector<std::string>& documents,
                                              const ClozeOptions& o) {
  ZAYA_CHECK(o.items > 0 && o.choices >= 2 && o.context_words >= 1 && o.min_count >= 1,
             "cloze: items, context_words and min_count must be positive and choices at least 2");
  std::vector<std::vector<std::string>> docs;
  std::map<std::string, int64_t> count;
  for (const std::string& d : documents) {
    docs.push_back(split_words(d));
    for (const std::string& w : docs.back())
      if (is_candidate(w)) count[w]++;
  }
  std::vector<std::string> pool;  // sorted (std::map order): deterministic
  for (const auto& [w, n] : count)
    if (n >= o.min_count) pool.push_back(w);
  ZAYA_CHECK(int64_t(pool.size()) >= o.choices * 2, "cloze: the text has ", pool.size(),
             " words seen at least ", o.min_count, " times; ", o.choices, " choices need at least ",
             o.choices * 2);
  const std::set<std::string> in_pool(pool.begin(), pool.end());
  // Every position that can be an item: a candidate word with context_words words before it.
  std::vector<std::pair<size_t, size_t>> sites;
  for (size_t d = 0; d < docs.size(); d++)
    for (size_t p = size_t(o.context_words); p < docs[d].size(); p++)
      if (in_pool.count(docs[d][p])) sites.emplace_back(d, p);
  ZAYA_CHECK(int64_t(sites.size()) >= o.items, "cloze: the text has ", sites.size(), " places for an item, ",
             o.items, " asked");
  std::mt19937_64 rng(o.seed);
  auto below = [&](uint64_t n) { return rng() % n; };  // modulo bias ~n / 2^64: negligible
  // A partial Fisher-Yates shuffle picks distinct sites.
  std::vector<nlohmann::json> items;
  for (int64_t i = 0; i < o.items; i++) {
    std::swap(sites[size_t(i)], sites[size_t(i) + size_t(below(sites.size() - size_t(i)))]);
    const auto [d, p] = sites[size_t(i)];
    std::string context;
    for (size_t k = p - size_t(o.context_words); k < p; k++)
      context += (context.empty() ? "" : " ") + docs[d][k];
    const std::string& answer = docs[d][p];
    std::vector<std::string> choices{answer};
    while (int64_t(choices.size()) < o.choices) {
      const std::string& w = pool[size_t(below(pool.size()))];
      if (std::find(choices.begin(), choices.end(), w) == choices.end()) choices.push_back(w);
    }
    const size_t gold = size_t(below(uint64_t(o.choices)));
    std::swap(choices[0], choices[gold]);
    items.push_back({{"context", context}, {"choices", choices}, {"gold", gold}});
  }
  return items;
}

}  // namespace zaya::eval
