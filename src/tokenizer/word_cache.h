// A cache of BPE results keyed by the exact bytes of a chunk: running text repeats the same words over and
// over, so most chunks skip BPE entirely. Bounded in size; once full it starts over empty.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

class WordCache {
 public:
  // Ids cached for key (hash = XXH3 of key), or false.
  bool find(std::string_view key, uint64_t hash, const int32_t** ids, size_t* count) const;
  // Remembers key -> ids.
  void insert(std::string_view key, uint64_t hash, const int32_t* ids, size_t count);
  void clear();

  static uint64_t hash(std::string_view key);

 private:
  struct Entry {
    uint64_t hash;
    uint32_t key_offset, key_len, ids_offset, ids_len;
  };
  void rehash(size_t slot_count);

  std::vector<uint32_t> slots_;  // entry index + 1, 0 = empty
  std::vector<Entry> entries_;
  std::string keys_;          // all keys, back to back
  std::vector<int32_t> ids_;  // all id lists, back to back
};

}  // namespace zaya
