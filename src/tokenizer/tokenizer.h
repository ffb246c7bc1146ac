// Hugging Face tokenizer.json loader with an exact encoder/decoder for the BPE family: Gemma 3 (BPE with
// byte fallback over "▁"-marked text) and byte-level BPE (GPT-2 style). Matches the reference
// implementation (transformers.js, npm @lenml/tokenizers 3.7.2) token for token.
//
// encode(text):
//   1. invalid UTF-8 is repaired first (each maximal invalid subpart -> U+FFFD, what JavaScript's
//      TextDecoder does when the reference reads the same bytes from a file);
//   2. added tokens (special or not) are found in the raw text, leftmost-longest, and emitted as is;
//   3. each text section between them: normalizer -> pre-tokenizer -> BPE; consecutive unk tokens are
//      fused when the model says fuse_unk;
//   4. with add_special_tokens, the post-processor adds its special tokens (Gemma 3: <bos> first).
// decode(ids): tokens -> decoder pipeline -> text; invalid UTF-8 produced by byte tokens is repaired the
// same way. Tokenizer is immutable after load(): encode/decode are safe to call from many threads (each
// thread keeps a cache of word encodings for the last tokenizer it used, at most about 80 MB).
//
// Where the reference and the Hugging Face Rust library differ on something Gemma 3 does not use, this
// follows Hugging Face: Split honours every behavior (the reference treats all but Removed as Isolated)
// and Metaspace splits before each marker. Like the reference: added tokens are matched on the raw text
// whatever their "normalized" flag, "single_word" is ignored, and decode() does no
// clean_up_tokenization_spaces (a tokenizer_config.json setting; false for Gemma 3).
// Gemma 3 specifics: <bos> = 2 is prepended, no <eos> is appended; eos_id() is <eos> = 1, while chat turns
// end with <end_of_turn> = 106 (a generation config decides which ids stop generation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

class Tokenizer {
 public:
  // Loads a tokenizer.json; throws zaya::Error naming the file and the field for any problem.
  static Tokenizer load(const std::string& path);
  // Parses tokenizer.json text; name is the file name that error messages use.
  static Tokenizer from_json(std::string_view json_text, const std::string& name);

  // text (any bytes) -> token ids.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // ids -> text (valid UTF-8). Throws zaya::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // decode() without the final UTF-8 repair: raw bytes that may end inside a character whose last bytes
  // are still to come (StreamDecoder builds on it).
  std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  std::string id_to_token(int32_t id) const;          // throws zaya::Error for an id out of range
  int32_t vocab_size() const;                         // 1 + the largest id (vocab and added tokens)
  // <bos>: the first special token the post-processor puts before the text, else the token "<bos>",
  // "<s>" or "<|begin_of_text|>". <eos>: "<eos>", "</s>", "<|end_of_text|>" or "<|endoftext|>".
  // <pad>: "<pad>", "<|pad|>" or "[PAD]". Each is -1 when the tokenizer has none.
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  bool is_special(int32_t id) const;  // an added token marked "special" (false for ids out of range)

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Incremental decoding for streaming generation: push token ids one at a time and get back only text
// that is complete UTF-8 (byte-fallback tokens may split a character across tokens; those bytes are held
// until the character is complete). The concatenation of every push() and the final flush() equals
// decode(all ids, skip_special_tokens), including how the first token's leading space is treated.
// Keeps a reference to the tokenizer, which must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  // Adds one token; returns the newly completed text (possibly empty).
  std::string push(int32_t id);
  // Ends the stream: returns what is still held back (an incomplete character becomes U+FFFD) and
  // starts over as a fresh stream.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // the previous token (context) + tokens whose text is not all returned
                                 // (at most a few: trimmed while a character stays incomplete)
  size_t returned_ = 0;          // bytes of decode_bytes(window_) already returned or owned by the context
};

}  // namespace zaya
