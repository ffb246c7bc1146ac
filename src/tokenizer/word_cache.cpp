#include "tokenizer/word_cache.h"

#include <xxhash.h>

#include <cstring>

namespace zaya {
namespace {
// Bounds: 16 MB of keys (and at most 4x that of ids); when full the cache starts over.
constexpr size_t kMaxEntries = size_t(1) << 20;
constexpr size_t kMaxKeyBytes = size_t(16) << 20;
}  // namespace

uint64_t WordCache::hash(std::string_view key) {
  return XXH3_64bits(key.data(), key.size());
}

bool WordCache::find(std::string_view key, uint64_t hash, const int32_t** ids, size_t* count) const {
  if (slots_.empty()) return false;
  size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    uint32_t slot = slots_[i];
    if (slot == 0) return false;
    const Entry& e = entries_[slot - 1];
    if (e.hash == hash && e.key_len == key.size() &&
        std::memcmp(keys_.data() + e.key_offset, key.data(), key.size()) == 0) {
      *ids = ids_.data() + e.ids_offset;
      *count = e.ids_len;
      return true;
    }
  }
}

void WordCache::insert(std::string_view key, uint64_t hash, const int32_t* ids, size_t count) {
  if (entries_.size() >= kMaxEntries || keys_.size() + key.size() > kMaxKeyBytes) clear();
  if ((entries_.size() + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 1024 : slots_.size() * 2);
  entries_.push_back(
      {hash, uint32_t(keys_.size()), uint32_t(key.size()), uint32_t(ids_.size()), uint32_t(count)});
  keys_.append(key);
  ids_.insert(ids_.end(), ids, ids + count);
  size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i] != 0) i = (i + 1) & mask;
  slots_[i] = uint32_t(entries_.size());
}

void WordCache::clear() {
  slots_.clear();
  entries_.clear();
  keys_.clear();
  ids_.clear();
}

void WordCache::rehash(size_t slot_count) {
  slots_.assign(slot_count, 0);
  size_t mask = slot_count - 1;
  for (size_t k = 0; k < entries_.size(); k++) {
    size_t i = entries_[k].hash & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = uint32_t(k + 1);
  }
}

}  // namespace zaya
