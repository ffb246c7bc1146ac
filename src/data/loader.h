// The training data loader: packed, shuffled, deterministic and resumable sequences from a prepared
// .bin/.idx dataset (indexed_dataset.h).
//
// The token stream of epoch e is every document of the dataset in a seeded random order (a permutation
// that depends only on seed and e), concatenated; epochs follow each other without a gap, so the stream is
// endless. Documents prepared with --append-eos already end with the end-of-document token; for data
// without it the loader can insert one after each document (eod_id).
// A row is seq_len + 1 consecutive stream tokens: input_ids = the first seq_len, targets = the last
// seq_len (shifted by one). Consecutive rows overlap by that one token (row i starts at i * seq_len), so
// every token is a target exactly once and rows cross document (and epoch) boundaries freely.
// A global batch is the next B rows of the stream, whatever the number of ranks: rank r of N gets rows
// [r*B/N, (r+1)*B/N) of it, and every rank advances past the whole global batch. The state
// (seed, epoch, position in the epoch's stream) is all it takes to continue bit-identically.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/indexed_dataset.h"

namespace zaya::data {

struct LoaderState {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t position = 0;  // token offset of the next row in the epoch's stream
  bool operator==(const LoaderState&) const = default;
};

struct Batch {
  int64_t rows = 0, seq_len = 0;
  std::vector<int32_t> input_ids;  // [rows, seq_len], row-major
  std::vector<int32_t> targets;    // [rows, seq_len]: targets[r][t] = the token after input_ids[r][t]
  // Per row, the positions t in [0, seq_len) where input_ids[r][t] is the first token of a document, in
  // increasing order (for attention resets at document boundaries).
  std::vector<std::vector<int32_t>> doc_starts;
};

class DataLoader {
 public:
  // eod_id < 0: documents already end with their end-of-document token (zaya data prepare's default);
  // eod_id >= 0: the loader appends it after every document. Throws zaya::Error for a dataset whose
  // stream would be empty.
  DataLoader(std::shared_ptr<const IndexedDataset> data, uint64_t seed, int32_t eod_id = -1);

  // The rank's rows of the next global batch of global_batch rows of seq_len tokens, and advances past
  // the whole global batch. Requires global_batch >= 1, seq_len >= 1, 0 <= rank < world <= global_batch.
  Batch next_batch(int64_t global_batch, int64_t seq_len, int rank = 0, int world = 1);

  LoaderState state() const { return state_; }
  // Continues from a state() taken earlier (from this or another loader over the same dataset).
  void restore(const LoaderState& state);

  uint64_t tokens_per_epoch() const { return epoch_tokens_; }
  // The document order of an epoch (indices of dataset sequences); exposed for tests.
  std::vector<uint32_t> epoch_order(uint64_t epoch) const;

 private:
  struct EpochLayout {
    uint64_t epoch = UINT64_MAX;
    std::vector<uint32_t> order;   // document indices in stream order
    std::vector<uint64_t> starts;  // stream offset of each, plus the total at the end
  };
  const EpochLayout& layout(uint64_t epoch);
  // Reads n stream tokens from (epoch, position) into out; appends to doc_starts the indices i < limit
  // where out[i] begins a document.
  void read_stream(uint64_t epoch, uint64_t position, size_t n, uint32_t* out,
                   std::vector<int32_t>& doc_starts, size_t limit);

  std::shared_ptr<const IndexedDataset> data_;
  int32_t eod_id_;
  uint64_t epoch_tokens_ = 0;
  LoaderState state_;
  EpochLayout cache_[2];  // the epochs a row can touch: the current one and the next
};

}  // namespace zaya::data
