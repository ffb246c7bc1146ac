// Normalizers of tokenizer.json ("normalizer"): text -> text before pre-tokenization. Supported types:
// Replace (literal String pattern), Prepend, Strip, Sequence. Gemma 3 uses Replace(" " -> "▁").
#pragma once

#include <memory>
#include <string>

#include "tokenizer/json_field.h"

namespace zaya {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// Builds the normalizer a "normalizer" object describes; throws naming the field for unknown types.
std::unique_ptr<Normalizer> make_normalizer(const JsonField& config);

}  // namespace zaya
