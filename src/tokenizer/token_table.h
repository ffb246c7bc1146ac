// The tokenizer's tokens: id -> string and string -> id. The reverse map is an open-addressing table of
// ids keyed by XXH3 of the string (the strings live only once, in the id -> string vector), which loads
// and looks up several times faster than std::unordered_map<std::string, int> on 262k tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

class TokenTable {
 public:
  // Makes room for ids 0..n-1; ids not set yet have no string and are not found.
  void resize(size_t n);
  // Gives id the string token (id < size(); the id must not have a string yet, nor token another id).
  void set(int32_t id, std::string token);
  // The id of token, or -1.
  int32_t find(std::string_view token) const;
  bool has_id(int32_t id) const { return id >= 0 && size_t(id) < present_.size() && present_[size_t(id)]; }
  const std::string& token(int32_t id) const { return tokens_[size_t(id)]; }
  size_t size() const { return tokens_.size(); }

 private:
  void insert_slot(int32_t id);
  void rehash(size_t slot_count);

  std::vector<std::string> tokens_;
  std::vector<uint8_t> present_;
  std::vector<int32_t> slots_;       // ids, -1 = empty; capacity a power of two, at most half full
  std::vector<uint32_t> slot_hash_;  // low 32 bits of each slot's hash, to skip most string compares
  size_t count_ = 0;
};

}  // namespace zaya
