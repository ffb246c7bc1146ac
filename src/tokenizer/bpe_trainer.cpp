#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace zaya {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}
int32_t pair_left(uint64_t k) {
  return int32_t(k >> 32);
}
int32_t pair_right(uint64_t k) {
  return int32_t(k & 0xffffffffu);
}

// A heap entry: the count a pair had when pushed (stale when the pair's count changed since).
struct Candidate {
  int64_t count;
  uint64_t pair;
  // priority_queue pops the largest: higher count first, then the smaller pair.
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump();
}

}  // namespace

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : options_(std::move(options)) {
  specials_ = {"<pad>", "<eos>", "<bos>", "<unk>"};
  for (const std::string& s : options_.special_tokens) {
    ZAYA_CHECK(!s.empty(), "--special-tokens: a special token is empty");
    ZAYA_CHECK(utf8_is_valid(s), "--special-tokens: '", s, "' is not valid UTF-8");
    ZAYA_CHECK(std::find(specials_.begin(), specials_.end(), s) == specials_.end(), "--special-tokens: '", s,
               "' is given twice (or is one of the built-in <pad> <eos> <bos> <unk>)");
    specials_.push_back(s);
  }
  int32_t base = int32_t(specials_.size()) + 256;
  ZAYA_CHECK(options_.vocab_size > base && options_.vocab_size <= (1 << 24),
             "--vocab-size: ", options_.vocab_size, " is out of range (expected more than ", base,
             " = specials + 256 byte tokens, and at most 2^24)");
  ZAYA_CHECK(options_.min_frequency >= 1, "--min-frequency: ", options_.min_frequency, " (expected >= 1)");
}

void BpeTrainer::add_text(std::string_view text) {
  std::string repaired;
  if (!utf8_is_valid(text)) {
    repaired = utf8_repair(text);
    text = repaired;
  }
  stats_.bytes += text.size();
  for (std::string_view word : split_gpt2(text)) {
    word_counts_[std::string(word)]++;
    stats_.words++;
  }
}

std::string BpeTrainer::train() {
  auto t0 = std::chrono::steady_clock::now();
  ZAYA_CHECK(!word_counts_.empty(), "the training corpus is empty: no text to learn merges from");

  // Words in sorted order: their indices (and so the merge order on ties) do not depend on hashing.
  std::vector<std::pair<std::string, int64_t>> sorted(word_counts_.begin(), word_counts_.end());
  std::sort(sorted.begin(), sorted.end());
  stats_.unique_words = sorted.size();

  // Token table: specials, then the 256 bytes.
  std::vector<std::string> token_bytes(specials_.begin(), specials_.end());
  const int32_t byte_base = int32_t(token_bytes.size());
  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (int b = 0; b < 256; b++) {
    token_bytes.push_back(std::string(1, char(b)));
    id_of_bytes[token_bytes.back()] = byte_base + b;
  }

  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // words that (may) hold the pair
  for (size_t w = 0; w < sorted.size(); w++) {
    freq[w] = sorted[w].second;
    for (unsigned char c : sorted[w].first) words[w].push_back(byte_base + c);
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); i++) {
      uint64_t p = pair_key(s[i], s[i + 1]);
      counts[p] += freq[w];
      auto& list = where[p];
      if (list.empty() || list.back() != w) list.push_back(uint32_t(w));
    }
  }
  sorted.clear();
  std::vector<Candidate> initial;
  initial.reserve(counts.size());
  for (const auto& [p, c] : counts) initial.push_back({c, p});
  std::priority_queue<Candidate> heap(std::less<Candidate>(), std::move(initial));

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::unordered_set<uint64_t> merged;
  std::vector<uint64_t> stamp(words.size(), UINT64_MAX);  // the merge step that last rewrote each word
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<int32_t> rewritten;
  while (int32_t(token_bytes.size()) < options_.vocab_size && !heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    auto it = counts.find(top.pair);
    if (it == counts.end() || it->second != top.count) continue;  // stale entry
    if (top.count < options_.min_frequency) break;
    int32_t a = pair_left(top.pair), b = pair_right(top.pair);
    std::string joined = token_bytes[a] + token_bytes[b];
    // Two different merges can spell the same bytes ("ab"+"c", "a"+"bc"): they share one token.
    auto [id_it, is_new] = id_of_bytes.emplace(joined, int32_t(token_bytes.size()));
    int32_t id = id_it->second;
    if (is_new) token_bytes.push_back(joined);
    if (merged.insert(top.pair).second) merges.push_back({a, b});

    std::vector<uint32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    delta.clear();
    uint64_t step = merges.size();
    for (uint32_t w : list) {
      if (stamp[w] == step) continue;  // listed twice
      stamp[w] = step;
      std::vector<int32_t>& s = words[w];
      bool holds = false;
      for (size_t i = 0; i + 1 < s.size() && !holds; i++) holds = s[i] == a && s[i + 1] == b;
      if (!holds) continue;  // the pair was merged away by an earlier step
      int64_t f = freq[w];
      for (size_t i = 0; i + 1 < s.size(); i++) delta[pair_key(s[i], s[i + 1])] -= f;
      rewritten.clear();
      for (size_t i = 0; i < s.size(); i++) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          rewritten.push_back(id);
          i++;
        } else {
          rewritten.push_back(s[i]);
        }
      }
      s.swap(rewritten);
      for (size_t i = 0; i + 1 < s.size(); i++) {
        uint64_t p = pair_key(s[i], s[i + 1]);
        delta[p] += f;
        // Pairs without the new token were already in the word, so it is already on their lists.
        if (s[i] == id || s[i + 1] == id) {
          auto& l = where[p];
          if (l.empty() || l.back() != w) l.push_back(w);
        }
      }
    }
    // Apply the net changes in a fixed order (pair order), so heap contents never depend on hashing.
    std::vector<std::pair<uint64_t, int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [p, d] : changes) {
      if (d == 0) continue;
      int64_t& c = counts[p];
      c += d;
      ZAYA_ASSERT(c >= 0, "pair counts never go negative");
      if (c > 0)
        heap.push({c, p});
      else
        counts.erase(p);
    }
  }
  stats_.vocab_size = int32_t(token_bytes.size());
  stats_.merges = int32_t(merges.size());

  // tokenizer.json, written by hand: the vocabulary in id order, every string escaped by nlohmann::json.
  auto printable = [&](int32_t id) {
    if (id < byte_base) return token_bytes[id];
    std::string s;
    append_byte_level(s, token_bytes[id]);
    return s;
  };
  std::string out;
  out += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  for (size_t i = 0; i < specials_.size(); i++) {
    out += i ? ",\n" : "\n";
    out += "    {\"id\": " + std::to_string(i) + ", \"content\": " + json_string(specials_[i]) +
           ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
           "\"special\": true}";
  }
  std::string bos = json_string("<bos>");
  out += "\n  ],\n  \"normalizer\": null,\n";
  out +=
      "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
      "\"use_regex\": true},\n";
  out +=
      "  \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": " +
      bos +
      ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"SpecialToken\": "
      "{\"id\": " +
      bos +
      ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": " +
      bos + ", \"type_id\": 1}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {" +
      bos + ": {\"id\": " + bos + ", \"ids\": [2], \"tokens\": [" + bos + "]}}},\n";
  out +=
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
      "\"use_regex\": true},\n";
  out +=
      "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
      "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": "
      "false,\n"
      "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {";
  for (size_t id = 0; id < token_bytes.size(); id++) {
    out += id ? ",\n      " : "\n      ";
    out += json_string(printable(int32_t(id))) + ": " + std::to_string(id);
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < merges.size(); i++) {
    out += i ? ",\n      " : "\n      ";
    // "left right": byte-level tokens never hold a space, and every tokenizers version reads this form.
    out += json_string(printable(merges[i].first) + " " + printable(merges[i].second));
  }
  out += "\n    ]\n  }\n}\n";
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace zaya
