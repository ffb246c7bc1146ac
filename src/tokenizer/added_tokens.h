// Finding added tokens (special tokens such as <bos>, <start_of_turn>, and other literal tokens such as
// "\n\n" or "<table>") in raw input text before normalization: leftmost-longest matching over a byte
// trie, exactly like the reference tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

class AddedTokenMatcher {
 public:
  struct Match {
    size_t pos = std::string_view::npos;  // npos when nothing matched
    size_t len = 0;
    int32_t id = -1;
  };

  // Registers content (non-empty) as token id; a later registration of the same content wins.
  void add(std::string_view content, int32_t id);

  // The leftmost match at or after from; among matches starting there, the longest.
  Match find(std::string_view text, size_t from) const;

 private:
  struct Node {
    int32_t id = -1;                                    // token ending here, or -1
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index), sorted by byte
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};  // node 0 is the root
  bool first_byte_[256] = {};        // bytes that start some added token (fast skip)
};

}  // namespace zaya
