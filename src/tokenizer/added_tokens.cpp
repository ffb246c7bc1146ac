#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "core/error.h"

namespace zaya {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& kids = nodes_[size_t(node)].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), byte,
                             [](const std::pair<uint8_t, int32_t>& kid, uint8_t b) { return kid.first < b; });
  return (it != kids.end() && it->first == byte) ? it->second : -1;
}

void AddedTokenMatcher::add(std::string_view content, int32_t id) {
  ZAYA_ASSERT(!content.empty(), "the loader rejects empty added tokens");
  first_byte_[uint8_t(content[0])] = true;
  int32_t node = 0;
  for (char c : content) {
    uint8_t byte = uint8_t(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = int32_t(nodes_.size());
      nodes_.emplace_back();
      auto& kids = nodes_[size_t(node)].children;
      auto it =
          std::lower_bound(kids.begin(), kids.end(), byte,
                           [](const std::pair<uint8_t, int32_t>& kid, uint8_t b) { return kid.first < b; });
      kids.insert(it, {byte, next});
    }
    node = next;
  }
  nodes_[size_t(node)].id = id;
}

AddedTokenMatcher::Match AddedTokenMatcher::find(std::string_view text, size_t from) const {
  for (size_t i = from; i < text.size(); i++) {
    if (!first_byte_[uint8_t(text[i])]) continue;
    Match best;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); j++) {
      node = child(node, uint8_t(text[j]));
      if (node < 0) break;
      if (nodes_[size_t(node)].id >= 0) best = {i, j + 1 - i, nodes_[size_t(node)].id};
    }
    if (best.pos != std::string_view::npos) return best;
  }
  return {};
}

}  // namespace zaya
