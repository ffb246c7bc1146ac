// Reading a tokenizer.json. model.vocab and model.merges are nearly the whole file (262k tokens and 515k
// merges for Gemma 3), so they are streamed straight into flat arrays by a SAX pass instead of being
// built as a JSON tree (which costs about three times the parse itself, plus freeing it); everything
// else becomes an ordinary nlohmann::json document. When vocab or merges hold anything unexpected
// (a non-integer id, a malformed merge, a repeated key), the reader falls back to a full document and
// the same checked accessors as for every other field read them, so errors name the exact field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya {

struct TokenizerJson {
  // The document; a streamed model.vocab is {} and a streamed model.merges is [] in it.
  nlohmann::json doc;
  bool vocab_streamed = false, merges_streamed = false;
  std::vector<std::pair<std::string, int64_t>> vocab;       // (token, id) in file order, when streamed
  std::vector<std::pair<std::string, std::string>> merges;  // (left, right) in rank order, when streamed
};

// Parses tokenizer.json text; name is the file name for error messages. Throws zaya::Error for text that
// is not JSON.
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace zaya
