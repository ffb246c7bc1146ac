// A small open-addressing hash map from 64-bit keys to 64-bit values (linear probing, power-of-two
// capacity, at most half full). The BPE hot path looks up merge pairs and code points in it: one cache
// line per probe instead of std::unordered_map's node chasing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace zaya {

class FlatMap64 {
 public:
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);  // never a real key (callers' keys are smaller)

  // Makes room for n keys without rehashing.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > slots_.size()) rehash(cap);
  }

  // Inserts or overwrites key -> value.
  void insert_or_assign(uint64_t key, uint64_t value) {
    ZAYA_ASSERT(key != kEmptyKey, "the all-ones key marks empty slots");
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t mask = slots_.size() - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key) {
        slots_[i].value = value;
        return;
      }
      if (slots_[i].key == kEmptyKey) {
        slots_[i] = {key, value};
        size_++;
        return;
      }
    }
  }

  // The value stored for key, or nullptr.
  const uint64_t* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t mask = slots_.size() - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmptyKey) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key, value;
  };

  // splitmix64's finalizer: pair keys differ in few bits, so mix them well.
  static uint64_t hash(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{kEmptyKey, 0});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmptyKey) insert_or_assign(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace zaya
