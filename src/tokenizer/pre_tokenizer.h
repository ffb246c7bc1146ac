// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): cut normalized text into pieces that the model
// encodes independently. Supported types: Split (literal String pattern, every behavior, invert),
// ByteLevel (GPT-2 split + byte-to-code-point mapping), Metaspace, WhitespaceSplit, Sequence.
// Split follows the Hugging Face (Rust) semantics of each behavior. Gemma 3 declares
// Split(" ", MergedWithPrevious), which never fires: its normalizer has already replaced every space.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_field.h"

namespace zaya {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces pieces with their sub-pieces, in order; empty pieces are dropped. first_section is true when
  // the text starts at the beginning of the input (Metaspace's prepend_scheme "first" needs it).
  virtual void split(std::vector<std::string>& pieces, bool first_section) const = 0;
};

// Builds the pre-tokenizer a "pre_tokenizer" object describes; throws naming the field when unsupported.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& config);

}  // namespace zaya
