// Token shards in the Megatron-LM MMapIndexedDataset layout, so that Megatron and other tools read them:
//   PREFIX.bin: the tokens of every sequence back to back (little-endian, dtype below).
//   PREFIX.idx: header "MMIDIDX\0\0" (9 bytes), version u64 = 1, dtype code u8, sequence count u64 (S),
//               document count u64 (D), sizes int32[S] (tokens per sequence), pointers int64[S] (byte
//               offset of each sequence in .bin), doc_idx int64[D] (sequence index where each document
//               starts, plus a final S: D = documents + 1).
// zaya writes one sequence per document (doc_idx = 0, 1, ..., S), like Megatron's preprocess_data.py.
//
// Token dtype: Megatron's codes are 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
// 8 uint16; there is no uint32. zaya writes 4-byte tokens and declares code 4 (int32): token ids are below
// 2^31, where uint32 and int32 have the same bytes, so every Megatron version reads the same ids. The
// reader accepts code 4 and code 8 (uint16, what Megatron writes for vocabularies under 65500).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"

namespace zaya::data {

inline constexpr uint8_t kDTypeInt32 = 4;   // 4-byte tokens (see above: our uint32 ids, all < 2^31)
inline constexpr uint8_t kDTypeUInt16 = 8;  // 2-byte tokens

// Streams documents into PREFIX.bin / PREFIX.idx. Files are written under temporary names and renamed
// by finish(), so an interrupted run never leaves a .bin/.idx pair that looks complete.
class IndexedDatasetWriter {
 public:
  explicit IndexedDatasetWriter(const std::string& prefix);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document of n tokens (n may be 0; ids must be < 2^31).
  void add_document(const uint32_t* tokens, size_t n);
  // Writes the index and renames both files into place. Throws zaya::Error on any I/O failure.
  void finish();

  uint64_t documents() const { return sizes_.size(); }
  uint64_t tokens() const { return tokens_; }

 private:
  std::string prefix_;
  struct File;
  std::unique_ptr<File> bin_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  uint64_t tokens_ = 0;
  bool finished_ = false;
};

// A read-only, memory-mapped PREFIX.bin / PREFIX.idx pair. open() validates the whole index against the
// data file (magic, version, dtype, counts vs file size, sizes, pointers and doc_idx in range) and throws
// zaya::Error naming the file and the field for anything wrong, so that reads afterwards cannot go out of
// bounds.
class IndexedDataset {
 public:
  static std::shared_ptr<const IndexedDataset> open(const std::string& prefix);

  size_t num_sequences() const { return sizes_.size(); }  // = documents for files zaya writes
  uint64_t num_tokens() const { return num_tokens_; }
  uint8_t dtype_code() const { return dtype_code_; }
  size_t length(size_t seq) const { return size_t(sizes_[seq]); }
  const std::vector<int64_t>& doc_idx() const { return doc_idx_; }

  // Copies tokens [offset, offset + count) of sequence seq into out (widened to uint32).
  // Requires seq < num_sequences() and offset + count <= length(seq).
  void read(size_t seq, size_t offset, size_t count, uint32_t* out) const;
  std::vector<uint32_t> sequence(size_t seq) const;

  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::shared_ptr<MappedFile> bin_;
  uint8_t dtype_code_ = 0;
  size_t item_size_ = 0;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_idx_;
  uint64_t num_tokens_ = 0;
};

// Parses and validates index bytes (the .idx file content) against a data file of bin_size bytes; name is
// the .idx path for messages. Exposed for tests and the fuzz target.
struct IndexContents {
  uint8_t dtype_code = 0;
  std::vector<int32_t> sizes;
  std::vector<int64_t> pointers;
  std::vector<int64_t> doc_idx;
};
IndexContents parse_index(const uint8_t* data, size_t size, uint64_t bin_size, const std::string& name);

// Serializes an index (the inverse of parse_index).
std::string serialize_index(const IndexContents& index);

}  // namespace zaya::data
