// Post-processors of tokenizer.json ("post_processor"): add the special tokens around an encoded text
// when add_special_tokens is true. Supported types: TemplateProcessing (the "single" template),
// BertProcessing / RobertaProcessing (cls A sep), ByteLevel (adds nothing), Sequence.
// Gemma 3 declares TemplateProcessing single = [<bos>, A]: encode() prepends <bos> = 2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_field.h"

namespace zaya {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Wraps ids (the encoded text) with the special tokens the template asks for.
  virtual void apply(std::vector<int32_t>& ids) const = 0;
  // The first special token placed before the text, or -1 (used as the tokenizer's <bos>).
  virtual int32_t first_prefix_id() const = 0;
};

// Builds the post-processor a "post_processor" object describes; token_id resolves a token string to
// its id (-1 when absent); every id must be below vocab_size. Throws naming the field when unsupported
// or inconsistent.
using TokenIdFn = std::function<int32_t(const std::string& token)>;
std::unique_ptr<PostProcessor> make_post_processor(const JsonField& config, const TokenIdFn& token_id,
                                                   int32_t vocab_size);

}  // namespace zaya
