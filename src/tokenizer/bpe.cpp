#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {

constexpr size_t kMaxCachedChunkBytes = 64;  // longer chunks rarely repeat

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}
uint64_t cp_pair_key(uint32_t left, uint32_t right) {
  return (uint64_t(left) << 21) | right;
}

// The last code point of a non-empty valid UTF-8 string.
uint32_t last_code_point(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (uint8_t(s[start]) & 0xC0) == 0x80) start--;
  uint32_t cp;
  utf8_decode(s, start, &cp);
  return cp;
}

// Min-heap order on (rank, left position): std::push_heap keeps the "largest" on top.
bool later(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}

}  // namespace

BpeModel::BpeModel(const JsonField& model, const std::vector<std::pair<std::string, std::string>>& merges,
                   const TokenTable& tokens)
    : tokens_(&tokens) {
  if (auto dropout = model.find("dropout")) {
    if (!dropout->raw().is_number()) {
      dropout->fail(str_cat("expected a number or null, got ", dropout->type_name()));
    }
    if (dropout->raw().get<double>() != 0.0) dropout->fail("BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto affix = model.find(key); affix && !affix->str().empty()) {
      affix->fail("is not supported (expected null or \"\")");
    }
  }
  byte_fallback_ = model.bool_or("byte_fallback", false);
  fuse_unk_ = model.bool_or("fuse_unk", false);
  ignore_merges_ = model.bool_or("ignore_merges", false);
  if (auto unk = model.find("unk_token")) {
    unk_id_ = tokens.find(unk->str());
    if (unk_id_ < 0) unk->fail(str_cat("unk_token \"", unk->str(), "\" is not in model.vocab"));
  }

  // One-character tokens are the initial symbols of BPE.
  ascii_ids_.fill(-1);
  for (int32_t id = 0; id < int32_t(tokens.size()); id++) {
    if (!tokens.has_id(id) || tokens.token(id).empty()) continue;
    const std::string& token = tokens.token(id);
    uint32_t cp;
    if (size_t(utf8_decode(token, 0, &cp)) != token.size()) continue;
    if (cp < 128) {
      ascii_ids_[cp] = id;
    } else {
      char_ids_.insert_or_assign(cp, uint64_t(uint32_t(id)));
    }
  }
  byte_ids_.fill(-1);
  for (int b = 0; b < 256; b++) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[size_t(b)] = tokens.find(name);
  }

  size_t n_merges = merges.size();
  if (n_merges >= (size_t(1) << 31)) fail_field(model.file(), "model.merges", "too many merges");
  merges_.reserve(n_merges);
  std::string joined;  // left + right, reused across merges
  for (size_t i = 0; i < n_merges; i++) {
    const std::string& left = merges[i].first;
    const std::string& right = merges[i].second;
    auto where = [&] { return "model.merges[" + std::to_string(i) + "]"; };
    if (left.empty() || right.empty()) fail_field(model.file(), where(), "merge sides must not be empty");
    joined.assign(left).append(right);
    int32_t left_id = tokens.find(left), right_id = tokens.find(right), merged_id = tokens.find(joined);
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      const std::string& missing = left_id < 0 ? left : right_id < 0 ? right : joined;
      fail_field(model.file(), where(),
                 str_cat("merge refers to \"", missing, "\", which is not in model.vocab"));
    }
    // A repeated pair keeps its last rank, as in the reference implementations.
    merges_.insert_or_assign(pair_key(left_id, right_id), (uint64_t(i) << 32) | uint32_t(merged_id));
    uint32_t a = last_code_point(left), b;
    utf8_decode(right, 0, &b);
    if (a < 128 && b < 128) {
      ascii_joinable_[(a * 128 + b) / 64] |= uint64_t(1) << ((a * 128 + b) % 64);
    } else {
      joinable_pairs_.insert_or_assign(cp_pair_key(a, b), 1);
    }
  }
}

int32_t BpeModel::char_id(uint32_t cp) const {
  if (cp < 128) return ascii_ids_[cp];
  const uint64_t* id = char_ids_.find(cp);
  return id ? int32_t(uint32_t(*id)) : -1;
}

bool BpeModel::joinable(uint32_t a, uint32_t b) const {
  if (a < 128 && b < 128) return (ascii_joinable_[(a * 128 + b) / 64] >> ((a * 128 + b) % 64)) & 1;
  return joinable_pairs_.find(cp_pair_key(a, b)) != nullptr;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const {
  if (piece.empty()) return;
  if (ignore_merges_) {  // a piece that is a token is taken whole
    int32_t id = tokens_->find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  size_t chunk_begin = 0;
  uint32_t prev = 0;
  for (size_t i = 0; i < piece.size();) {
    uint32_t cp = uint8_t(piece[i]);
    int len = 1;
    if (cp >= 0x80) len = utf8_decode(piece, i, &cp);
    if (i > chunk_begin && !joinable(prev, cp)) {
      encode_chunk(piece.substr(chunk_begin, i - chunk_begin), out, scratch);
      chunk_begin = i;
    }
    prev = cp;
    i += size_t(len);
  }
  encode_chunk(piece.substr(chunk_begin), out, scratch);
}

void BpeModel::encode_chunk(std::string_view chunk, std::vector<int32_t>& out, BpeScratch& scratch) const {
  if (chunk.size() == 1 && uint8_t(chunk[0]) < 0x80 && ascii_ids_[uint8_t(chunk[0])] >= 0) {
    out.push_back(ascii_ids_[uint8_t(chunk[0])]);  // punctuation between words: no BPE, no cache
    return;
  }
  if (chunk.size() > kMaxCachedChunkBytes) {
    merge_chunk(chunk, out, scratch);
    return;
  }
  uint64_t hash = WordCache::hash(chunk);
  const int32_t* cached;
  size_t count;
  if (scratch.cache.find(chunk, hash, &cached, &count)) {
    out.insert(out.end(), cached, cached + count);
    return;
  }
  size_t start = out.size();
  merge_chunk(chunk, out, scratch);
  scratch.cache.insert(chunk, hash, out.data() + start, out.size() - start);
}

void BpeModel::merge_chunk(std::string_view chunk, std::vector<int32_t>& out, BpeScratch& scratch) const {
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  for (size_t i = 0; i < chunk.size();) {
    uint32_t cp;
    int len = utf8_decode(chunk, i, &cp);
    int32_t index = int32_t(symbols.size());
    symbols.push_back({char_id(cp), index - 1, index + 1, uint32_t(i), uint32_t(len)});
    i += size_t(len);
  }
  symbols.back().next = -1;

  // Queues the merge of symbols left and right (neighbours) if the pair has a rank.
  auto consider = [&](int32_t left, int32_t right) {
    int32_t a = symbols[size_t(left)].id, b = symbols[size_t(right)].id;
    if (a < 0 || b < 0) return;
    const uint64_t* merge = merges_.find(pair_key(a, b));
    if (!merge) return;
    heap.push_back({uint32_t(*merge >> 32), uint32_t(left), right, a, b, int32_t(uint32_t(*merge))});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < symbols.size(); i++) consider(int32_t(i), int32_t(i + 1));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    BpeScratch::Candidate c = heap.back();
    heap.pop_back();
    auto& left = symbols[c.left];
    // Skip candidates made stale by earlier merges: the pair must still be adjacent and unchanged.
    if (left.len == 0 || left.next != c.right || left.id != c.left_id) continue;
    auto& right = symbols[size_t(c.right)];
    if (right.id != c.right_id) continue;
    left.id = c.merged_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[size_t(left.next)].prev = int32_t(c.left);
    if (left.prev >= 0) consider(left.prev, int32_t(c.left));
    if (left.next >= 0) consider(int32_t(c.left), left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[size_t(i)].next) {
    const auto& s = symbols[size_t(i)];
    if (s.id >= 0)
      out.push_back(s.id);
    else
      push_unknown(chunk.substr(s.begin, s.len), out);
  }
}

void BpeModel::push_unknown(std::string_view bytes, std::vector<int32_t>& out) const {
  if (byte_fallback_) {
    bool all_bytes_known = true;
    for (char c : bytes) all_bytes_known = all_bytes_known && byte_ids_[uint8_t(c)] >= 0;
    if (all_bytes_known) {
      for (char c : bytes) out.push_back(byte_ids_[uint8_t(c)]);
      return;
    }
  }
  ZAYA_CHECK(unk_id_ >= 0, "tokenizer: the text has a character outside the vocabulary (bytes ", bytes.size(),
             ") and the model declares no unk_token");
  out.push_back(unk_id_);
}

}  // namespace zaya
