// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocab, ranked merges, byte fallback
// (<0xNN> tokens for characters outside the vocabulary), unk / fuse_unk and ignore_merges.
//
// Merging follows the reference exactly: start from one symbol per code point, repeatedly merge the
// adjacent pair with the lowest merge rank (leftmost first on ties), until no pair has a rank.
// To be fast on long pieces (Gemma 3 pre-tokenizes a whole line as ONE piece), a piece is first cut
// into chunks at every boundary that no merge can ever join: a boundary between code points a and b is
// joinable only if some merge (left, right) has left ending in a and right starting with b. Merges never
// cross a non-joinable boundary, so chunks encode independently and give identical results; chunks are
// then cached (per thread).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/flat_map.h"
#include "tokenizer/json_field.h"
#include "tokenizer/token_table.h"
#include "tokenizer/word_cache.h"

namespace zaya {

// Working memory of BpeModel::encode, including the word cache (one per thread: see Tokenizer::encode).
struct BpeScratch {
  struct Symbol {
    int32_t id;           // token id, or -1 for a code point outside the vocabulary
    int32_t prev, next;   // neighbours in the linked list, -1 at the ends
    uint32_t begin, len;  // bytes of the chunk it covers; len 0 once merged into its left neighbour
  };
  struct Candidate {
    uint32_t rank, left;  // priority: lowest rank, then leftmost
    int32_t right, left_id, right_id, merged_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::vector<int32_t> ids;
  WordCache cache;
};

class BpeModel {
 public:
  // Reads the options of the "model" object; merges are its (left, right) pairs in rank order (already
  // type-checked). tokens is the tokenizer's full token table (vocab plus added tokens, as the reference
  // uses it); it must outlive the model.
  BpeModel(const JsonField& model, const std::vector<std::pair<std::string, std::string>>& merges,
           const TokenTable& tokens);

  // Appends the ids of one pre-tokenized piece (valid UTF-8) to out.
  void encode(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const;

  int32_t unk_id() const { return unk_id_; }
  bool fuse_unk() const { return fuse_unk_; }

 private:
  int32_t char_id(uint32_t cp) const;
  bool joinable(uint32_t left_cp, uint32_t right_cp) const;
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out, BpeScratch& scratch) const;
  void merge_chunk(std::string_view chunk, std::vector<int32_t>& out, BpeScratch& scratch) const;
  void push_unknown(std::string_view bytes, std::vector<int32_t>& out) const;

  const TokenTable* tokens_;
  FlatMap64 merges_;          // (left id << 32 | right id) -> (rank << 32 | merged id)
  FlatMap64 joinable_pairs_;  // (left cp << 21 | right cp) for non-ASCII pairs -> 1
  std::array<uint64_t, 128 * 128 / 64> ascii_joinable_{};  // bit (a * 128 + b) for ASCII pairs
  std::array<int32_t, 128> ascii_ids_{};                   // id of each one-character ASCII token, or -1
  FlatMap64 char_ids_;                   // non-ASCII code point -> id of its one-character token
  std::array<int32_t, 256> byte_ids_{};  // id of <0xNN>, or -1
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
};

}  // namespace zaya
