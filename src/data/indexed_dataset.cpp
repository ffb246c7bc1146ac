#include "data/indexed_dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace zaya::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, sequence and document counts

size_t item_size_of(uint8_t code, const std::string& name) {
  if (code == kDTypeInt32) return 4;
  if (code == kDTypeUInt16) return 2;
  fail(str_cat(name, ": dtype code ", int(code),
               " is not supported (expected 4 = int32 for 4-byte tokens or 8 = uint16)"));
}

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86 and ARM are little-endian, like the format
  return v;
}

}  // namespace

// ---- writer ----

struct IndexedDatasetWriter::File {
  std::string path;
  FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix) : prefix_(prefix) {
  bin_ = std::make_unique<File>();
  bin_->path = prefix + ".bin.tmp";
  bin_->f = std::fopen(bin_->path.c_str(), "wb");
  ZAYA_CHECK(bin_->f, "cannot create '", bin_->path, "': ", std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_ && bin_) {
    std::fclose(bin_->f);
    bin_->f = nullptr;
    std::remove(bin_->path.c_str());
  }
}

void IndexedDatasetWriter::add_document(const uint32_t* tokens, size_t n) {
  ZAYA_ASSERT(!finished_, "add_document after finish");
  ZAYA_CHECK(n <= size_t(INT32_MAX), prefix_, ": a document of ", n,
             " tokens does not fit the int32 sizes of the .idx format");
  for (size_t i = 0; i < n; i++)
    ZAYA_CHECK(tokens[i] <= uint32_t(INT32_MAX), prefix_, ": token id ", tokens[i], " is not below 2^31");
  pointers_.push_back(int64_t(tokens_ * 4));
  sizes_.push_back(int32_t(n));
  tokens_ += n;
  if (n > 0)
    ZAYA_CHECK(std::fwrite(tokens, 4, n, bin_->f) == n, "cannot write '", bin_->path,
               "': ", std::strerror(errno));
}

void IndexedDatasetWriter::finish() {
  ZAYA_ASSERT(!finished_, "finish called twice");
  ZAYA_CHECK(std::fflush(bin_->f) == 0, "cannot write '", bin_->path, "': ", std::strerror(errno));
  std::fclose(bin_->f);
  bin_->f = nullptr;

  IndexContents index;
  index.dtype_code = kDTypeInt32;
  index.sizes = sizes_;
  index.pointers = pointers_;
  index.doc_idx.resize(sizes_.size() + 1);
  for (size_t i = 0; i < index.doc_idx.size(); i++) index.doc_idx[i] = int64_t(i);
  std::string bytes = serialize_index(index);
  std::string idx_tmp = prefix_ + ".idx.tmp";
  FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  ZAYA_CHECK(f, "cannot create '", idx_tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  ZAYA_CHECK(ok, "cannot write '", idx_tmp, "': ", std::strerror(errno));

  std::error_code ec;
  std::filesystem::rename(bin_->path, prefix_ + ".bin", ec);
  ZAYA_CHECK(!ec, "cannot rename '", bin_->path, "' to '", prefix_, ".bin': ", ec.message());
  std::filesystem::rename(idx_tmp, prefix_ + ".idx", ec);
  ZAYA_CHECK(!ec, "cannot rename '", idx_tmp, "' to '", prefix_, ".idx': ", ec.message());
  finished_ = true;
}

// ---- index (de)serialization ----

std::string serialize_index(const IndexContents& index) {
  std::string out(kMagic, 9);
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  uint64_t version = 1, seqs = index.sizes.size(), docs = index.doc_idx.size();
  put(&version, 8);
  put(&index.dtype_code, 1);
  put(&seqs, 8);
  put(&docs, 8);
  put(index.sizes.data(), 4 * seqs);
  put(index.pointers.data(), 8 * index.pointers.size());
  put(index.doc_idx.data(), 8 * docs);
  return out;
}

IndexContents parse_index(const uint8_t* data, size_t size, uint64_t bin_size, const std::string& name) {
  ZAYA_CHECK(size >= kHeaderBytes, name, ": truncated index: ", size, " bytes, the header alone is ",
             kHeaderBytes);
  ZAYA_CHECK(std::memcmp(data, kMagic, 9) == 0, name,
             ": not a Megatron MMapIndexedDataset index (expected magic \"MMIDIDX\\0\\0\")");
  uint64_t version = load_le<uint64_t>(data + 9);
  ZAYA_CHECK(version == 1, name, ": index version ", version, " is not supported (expected 1)");
  IndexContents index;
  index.dtype_code = data[17];
  size_t item = item_size_of(index.dtype_code, name);
  uint64_t seqs = load_le<uint64_t>(data + 18), docs = load_le<uint64_t>(data + 26);
  // Counts come from the file: bound them by the file size before multiplying.
  uint64_t body = size - kHeaderBytes;
  ZAYA_CHECK(seqs <= body / 12 && docs <= body / 8 && seqs * 12 + docs * 8 == body, name, ": size ", size,
             " bytes does not match sequence count ", seqs, " and document count ", docs, " (expected ",
             kHeaderBytes, " + 12 * sequences + 8 * documents bytes)");
  index.sizes.resize(seqs);
  index.pointers.resize(seqs);
  index.doc_idx.resize(docs);
  const uint8_t* p = data + kHeaderBytes;
  if (seqs) std::memcpy(index.sizes.data(), p, 4 * seqs);
  if (seqs) std::memcpy(index.pointers.data(), p + 4 * seqs, 8 * seqs);
  if (docs) std::memcpy(index.doc_idx.data(), p + 12 * seqs, 8 * docs);

  for (uint64_t i = 0; i < seqs; i++) {
    int32_t n = index.sizes[i];
    int64_t ptr = index.pointers[i];
    ZAYA_CHECK(n >= 0, name, ": sizes[", i, "] = ", n, " is negative");
    ZAYA_CHECK(ptr >= 0 && uint64_t(ptr) <= bin_size && uint64_t(n) * item <= bin_size - uint64_t(ptr), name,
               ": sequence ", i, " (pointers[", i, "] = ", ptr, ", sizes[", i, "] = ", n,
               ") reaches past the end of the data file (", bin_size, " bytes)");
    ZAYA_CHECK(ptr % int64_t(item) == 0, name, ": pointers[", i, "] = ", ptr, " is not a multiple of the ",
               item, "-byte token size");
  }
  ZAYA_CHECK(docs >= 1, name, ": doc_idx is empty (expected at least the starting 0)");
  ZAYA_CHECK(index.doc_idx[0] == 0, name, ": doc_idx[0] = ", index.doc_idx[0], " (expected 0)");
  for (uint64_t i = 1; i < docs; i++)
    ZAYA_CHECK(index.doc_idx[i] >= index.doc_idx[i - 1] && uint64_t(index.doc_idx[i]) <= seqs, name,
               ": doc_idx[", i, "] = ", index.doc_idx[i], " is out of order or past the sequence count ",
               seqs);
  ZAYA_CHECK(uint64_t(index.doc_idx[docs - 1]) == seqs, name, ": doc_idx ends at ", index.doc_idx[docs - 1],
             " (expected the sequence count ", seqs, ")");
  return index;
}

// ---- reader ----

std::shared_ptr<const IndexedDataset> IndexedDataset::open(const std::string& prefix) {
  auto ds = std::shared_ptr<IndexedDataset>(new IndexedDataset());
  ds->prefix_ = prefix;
  ds->bin_ = MappedFile::open(prefix + ".bin");
  auto idx = MappedFile::open(prefix + ".idx");
  IndexContents index = parse_index(idx->data(), idx->size(), ds->bin_->size(), idx->path());
  ds->dtype_code_ = index.dtype_code;
  ds->item_size_ = item_size_of(index.dtype_code, idx->path());
  ds->sizes_ = std::move(index.sizes);
  ds->pointers_ = std::move(index.pointers);
  ds->doc_idx_ = std::move(index.doc_idx);
  for (int32_t n : ds->sizes_) ds->num_tokens_ += uint64_t(n);
  return ds;
}

void IndexedDataset::read(size_t seq, size_t offset, size_t count, uint32_t* out) const {
  ZAYA_ASSERT(seq < sizes_.size() && offset + count <= size_t(sizes_[seq]), "read past a sequence");
  const uint8_t* p = bin_->data() + pointers_[seq] + offset * item_size_;
  if (item_size_ == 4) {
    if (count) std::memcpy(out, p, count * 4);
  } else {
    for (size_t i = 0; i < count; i++) out[i] = load_le<uint16_t>(p + 2 * i);
  }
}

std::vector<uint32_t> IndexedDataset::sequence(size_t seq) const {
  std::vector<uint32_t> out(length(seq));
  read(seq, 0, out.size(), out.data());
  return out;
}

}  // namespace zaya::data
