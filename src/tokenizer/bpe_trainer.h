// Training a byte-level BPE tokenizer (GPT-2 style) and writing it as a Hugging Face tokenizer.json.
//
// Design choice: a ByteLevel pre-tokenizer rather than Gemma 3's "▁"-normalizer + byte_fallback. Every
// byte is one of the 256 base tokens, so any input, including control characters, unknown scripts and
// literal "▁", decodes back to exactly the same bytes, with no <unk> and no separate <0xNN> tokens
// (the base alphabet *is* the byte fallback); and the GPT-2 split gives natural word boundaries, so the
// trainer counts each distinct word once and merges never cross words (fast, and a smaller but better
// used vocabulary). Both the project's Tokenizer and Hugging Face tokenizers load the result.
//
// The file: ids 0..3 are <pad>, <eos>, <bos>, <unk> (special added tokens, Gemma 3's first ids), then any
// extra special tokens, then the 256 byte tokens in byte order, then one token per merge. Pre-tokenizer
// and decoder ByteLevel, no normalizer, and a TemplateProcessing post-processor that puts <bos> first.
//
// Algorithm: count the words of the corpus, then repeatedly merge the most frequent adjacent pair (ties:
// the smaller (left id, right id) pair), updating pair counts incrementally from the words that hold
// the merged pair (a per-pair list of words + a max-heap with lazy deletion), never recounting
// everything. The output depends only on the text added, in order, and the options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zaya {

struct BpeTrainerOptions {
  int32_t vocab_size = 8192;                // total, specials and the 256 byte tokens included
  int64_t min_frequency = 2;                // a pair seen fewer times is never merged
  std::vector<std::string> special_tokens;  // extra special tokens after <pad> <eos> <bos> <unk>
};

struct BpeTrainerStats {
  int32_t vocab_size = 0;  // the tokens written (less than asked when min_frequency stops early)
  int32_t merges = 0;
  uint64_t bytes = 0, words = 0, unique_words = 0;
  double seconds = 0;  // time spent in train()
};

class BpeTrainer {
 public:
  // Throws zaya::Error for a vocab_size too small to hold the specials and the 256 byte tokens, a
  // min_frequency below 1, or a special token that is empty, repeated or not valid UTF-8.
  explicit BpeTrainer(BpeTrainerOptions options);

  // Counts the words of one document (any bytes: invalid UTF-8 is repaired first, as encode does).
  void add_text(std::string_view text);
  uint64_t bytes_added() const { return stats_.bytes; }

  // Learns the merges and returns the tokenizer.json text. Throws zaya::Error when no text was added.
  std::string train();
  const BpeTrainerStats& stats() const { return stats_; }

 private:
  BpeTrainerOptions options_;
  std::vector<std::string> specials_;
  std::unordered_map<std::string, int64_t> word_counts_;
  BpeTrainerStats stats_;
};

}  // namespace zaya
