#include "tokenizer/token_table.h"

#include <xxhash.h>

#include "core/error.h"

namespace zaya {
namespace {
uint64_t hash_of(std::string_view s) {
  return XXH3_64bits(s.data(), s.size());
}
}  // namespace

void TokenTable::resize(size_t n) {
  tokens_.resize(n);
  present_.resize(n, 0);
  size_t want = 1024;
  while (want < 2 * n) want *= 2;
  if (want > slots_.size()) rehash(want);  // room for every id up front: no rehash while loading
}

void TokenTable::set(int32_t id, std::string token) {
  ZAYA_ASSERT(id >= 0 && size_t(id) < tokens_.size() && !present_[size_t(id)], "callers set each id once");
  if ((count_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 1024 : slots_.size() * 2);
  tokens_[size_t(id)] = std::move(token);
  present_[size_t(id)] = 1;
  insert_slot(id);
  count_++;
}

void TokenTable::insert_slot(int32_t id) {
  uint64_t h = hash_of(tokens_[size_t(id)]);
  size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i] >= 0) i = (i + 1) & mask;
  slots_[i] = id;
  slot_hash_[i] = uint32_t(h >> 32);
}

void TokenTable::rehash(size_t slot_count) {
  slots_.assign(slot_count, -1);
  slot_hash_.assign(slot_count, 0);
  for (size_t id = 0; id < tokens_.size(); id++) {
    if (present_[id]) insert_slot(int32_t(id));
  }
}

int32_t TokenTable::find(std::string_view token) const {
  if (slots_.empty()) return -1;
  uint64_t h = hash_of(token);
  size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    int32_t id = slots_[i];
    if (id < 0) return -1;
    if (slot_hash_[i] == uint32_t(h >> 32) && tokens_[size_t(id)] == token) return id;
  }
}

}  // namespace zaya
