#include "data/loader.h"

#include <algorithm>

#include "core/error.h"
#include "data/split_hash.h"

namespace zaya::data {

DataLoader::DataLoader(std::shared_ptr<const IndexedDataset> data, uint64_t seed, int32_t eod_id)
    : data_(std::move(data)), eod_id_(eod_id) {
  ZAYA_ASSERT(data_ != nullptr, "DataLoader needs a dataset");
  epoch_tokens_ = data_->num_tokens() + (eod_id_ >= 0 ? data_->num_sequences() : 0);
  ZAYA_CHECK(epoch_tokens_ > 0, data_->prefix(), ": the dataset has no tokens to load");
  ZAYA_CHECK(data_->num_sequences() <= UINT32_MAX, data_->prefix(), ": too many documents (",
             data_->num_sequences(), ") for the loader's 32-bit document order");
  state_.seed = seed;
}

std::vector<uint32_t> DataLoader::epoch_order(uint64_t epoch) const {
  size_t n = data_->num_sequences();
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; i++) order[i] = uint32_t(i);
  // Fisher-Yates with a generator seeded by (seed, epoch); modulo bias is below 2^-32 for any real corpus.
  SplitMix64 rng(mix64(state_.seed) ^ mix64(epoch * 0x2545f4914f6cdd1dull + 1));
  for (size_t i = n; i > 1; i--) std::swap(order[i - 1], order[rng.next() % i]);
  return order;
}

const DataLoader::EpochLayout& DataLoader::layout(uint64_t epoch) {
  for (auto& c : cache_)
    if (c.epoch == epoch) return c;
  // Replace the older of the two cached epochs.
  EpochLayout& c =
      cache_[0].epoch == UINT64_MAX || (cache_[1].epoch != UINT64_MAX && cache_[0].epoch < cache_[1].epoch)
          ? cache_[0]
          : cache_[1];
  c.epoch = epoch;
  c.order = epoch_order(epoch);
  c.starts.resize(c.order.size() + 1);
  uint64_t offset = 0;
  for (size_t k = 0; k < c.order.size(); k++) {
    c.starts[k] = offset;
    offset += data_->length(c.order[k]) + (eod_id_ >= 0 ? 1 : 0);
  }
  c.starts[c.order.size()] = offset;
  ZAYA_ASSERT(offset == epoch_tokens_, "epoch length is the same for every order");
  return c;
}

void DataLoader::read_stream(uint64_t epoch, uint64_t position, size_t n, uint32_t* out,
                             std::vector<int32_t>& doc_starts, size_t limit) {
  size_t done = 0;
  while (done < n) {
    if (position >= epoch_tokens_) {
      position -= epoch_tokens_;
      epoch++;
      continue;
    }
    const EpochLayout& c = layout(epoch);
    // The document that holds `position`: the last start <= position (zero-length documents share starts;
    // upper_bound skips past them).
    size_t k = size_t(std::upper_bound(c.starts.begin(), c.starts.end(), position) - c.starts.begin()) - 1;
    uint64_t offset = position - c.starts[k];
    if (offset == 0 && done < limit) doc_starts.push_back(int32_t(done));
    size_t seq = c.order[k];
    size_t len = data_->length(seq);
    if (offset < len) {
      size_t take = std::min<uint64_t>(n - done, len - offset);
      data_->read(seq, size_t(offset), take, out + done);
      done += take;
      position += take;
    } else {
      ZAYA_ASSERT(eod_id_ >= 0 && offset == len, "a stream position past a document is its eod token");
      out[done++] = uint32_t(eod_id_);
      position++;
    }
  }
}

Batch DataLoader::next_batch(int64_t global_batch, int64_t seq_len, int rank, int world) {
  ZAYA_CHECK(global_batch >= 1 && seq_len >= 1, "next_batch: batch ", global_batch, " x seq_len ", seq_len,
             " (expected both >= 1)");
  ZAYA_CHECK(world >= 1 && rank >= 0 && rank < world && world <= global_batch, "next_batch: rank ", rank,
             " of ", world, " with a global batch of ", global_batch,
             " rows (expected 0 <= rank < world <= batch)");
  int64_t row_begin = rank * global_batch / world, row_end = (rank + 1) * global_batch / world;
  Batch b;
  b.rows = row_end - row_begin;
  b.seq_len = seq_len;
  b.input_ids.resize(size_t(b.rows * seq_len));
  b.targets.resize(size_t(b.rows * seq_len));
  b.doc_starts.resize(size_t(b.rows));
  std::vector<uint32_t> row(size_t(seq_len) + 1);
  for (int64_t r = row_begin; r < row_end; r++) {
    int64_t local = r - row_begin;
    read_stream(state_.epoch, state_.position + uint64_t(r * seq_len), row.size(), row.data(),
                b.doc_starts[size_t(local)], size_t(seq_len));
    for (uint32_t id : row)
      ZAYA_CHECK(id <= uint32_t(INT32_MAX), data_->prefix(), ": token id ", id, " is not below 2^31");
    for (int64_t t = 0; t < seq_len; t++) {
      b.input_ids[size_t(local * seq_len + t)] = int32_t(row[t]);
      b.targets[size_t(local * seq_len + t)] = int32_t(row[t + 1]);
    }
  }
  state_.position += uint64_t(global_batch * seq_len);
  state_.epoch += state_.position / epoch_tokens_;
  state_.position %= epoch_tokens_;
  return b;
}

void DataLoader::restore(const LoaderState& state) {
  ZAYA_CHECK(state.position < epoch_tokens_, "loader state: position ", state.position,
             " is past the epoch length ", epoch_tokens_, " of ", data_->prefix(),
             " (a state from a different dataset?)");
  if (state.seed != state_.seed)
    for (auto& c : cache_) c.epoch = UINT64_MAX;  // orders depend on the seed
  state_ = state;
}

}  // namespace zaya::data
