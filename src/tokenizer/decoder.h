// Decoders of tokenizer.json ("decoder"): token strings -> text. Supported types: Replace (literal String
// pattern), ByteFallback, Fuse, Strip, ByteLevel, Metaspace, Sequence. Gemma 3 declares
// Sequence[Replace("▁" -> " "), ByteFallback, Fuse].
//
// Decoders work on raw bytes: ByteFallback and ByteLevel may produce invalid or incomplete UTF-8 (a
// character split across tokens); Tokenizer::decode repairs the final text once (each maximal invalid
// subpart -> U+FFFD, the same result the reference gets by repairing each byte run), and StreamDecoder
// holds incomplete characters back until their last byte arrives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_field.h"

namespace zaya {

struct DecodeToken {
  std::string text;
  bool is_added = false;  // an added token (ByteLevel leaves those as they are)
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<DecodeToken>& tokens) const = 0;
};

// Builds the decoder a "decoder" object describes; throws naming the field when unsupported.
std::unique_ptr<Decoder> make_decoder(const JsonField& config);

}  // namespace zaya
