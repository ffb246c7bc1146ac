// The parts of a loaded tokenizer (shared by tokenizer_load.cpp, which builds it, and tokenizer.cpp,
// which runs it). Not a public header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_table.h"
#include "tokenizer/tokenizer.h"

namespace zaya {

struct Tokenizer::Impl {
  std::string name;                     // the file, for messages
  TokenTable tokens;                    // id <-> token string (vocab, then added tokens past it)
  std::vector<uint8_t> special;         // id -> 1 for special added tokens
  std::vector<uint8_t> added;           // id -> 1 for added tokens
  std::vector<uint8_t> lstrip, rstrip;  // id -> strip white space left / right of this added token
  AddedTokenMatcher added_matcher;
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;               // may be null: tokens are then joined with spaces
  int32_t bos = -1, eos = -1, pad = -1;
  uint64_t serial = 0;  // unique per loaded tokenizer: keys the per-thread word caches
};

}  // namespace zaya
