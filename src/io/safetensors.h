// Reader for the safetensors format (https://github.com/huggingface/safetensors):
//
//   [8 bytes]  N, little-endian uint64: the header length
//   [N bytes]  UTF-8 JSON object: {"__metadata__": {str: str}, "<name>": {"dtype": "F32",
//              "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//   [rest]     the data region; [begin, end) is relative to its first byte; C order, little-endian.
//
// Files are untrusted: every field is checked before it is used, and a bad file is a zaya::Error that
// names the file, the tensor and the field. Checks: the header length (at most 100 MB, within the
// file), the header is a JSON object without duplicate keys, every entry is an object with exactly
// dtype/shape/data_offsets, the dtype is one zaya supports, dims are non-negative integers whose
// product (and byte size) does not overflow, data_offsets are two ascending integers inside the data
// region, end - begin == numel * dtype size, tensors do not overlap, `__metadata__` maps strings to
// strings. Gaps between tensors and trailing bytes are allowed (harmless; the reference writer makes
// none).
//
// Alignment: tensor() returns a zero-copy view into the mapping when the tensor's address is a
// multiple of its element size (always so for files from the Hugging Face writer or ours, whose data
// region starts 8-byte aligned with tensors sorted by descending alignment). Otherwise it copies the
// tensor into fresh 64-byte aligned memory, so a Tensor from this reader can always be accessed
// through a typed pointer. Views are read-only (the mapping is PROT_READ): clone() to modify.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace zaya {

// Header length limit, as in the reference implementation: a bigger header is a hostile file.
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets [begin, end) relative to the start of the data region
  uint64_t end = 0;

  int64_t numel() const { return shape_numel(shape); }
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps `path` and parses it. Throws zaya::Error naming the path on any malformed content.
  static SafetensorsFile open(const std::string& path);

  // Parses `size` bytes at `bytes` (a whole file). `name` is used in error messages. The returned
  // views point into `bytes`: `owner` (may be null) is stored in every Tensor to keep them alive;
  // without an owner the caller must keep the bytes alive while tensors are in use.
  static SafetensorsFile parse(const uint8_t* bytes, size_t size, const std::string& name,
                               std::shared_ptr<void> owner = nullptr);

  const std::string& path() const { return path_; }
  size_t size() const { return tensors_.size(); }  // number of tensors
  // Tensor names in data order (ascending begin offset, then name).
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws zaya::Error naming the file and tensor when absent.
  const TensorInfo& info(const std::string& name) const;
  // All tensors in data order.
  const std::vector<TensorInfo>& infos() const { return tensors_; }
  // A zero-copy view (or an aligned copy, see the alignment note above) of tensor `name`.
  Tensor tensor(const std::string& name) const;
  // The raw stored bytes of tensor `name`: info(name).nbytes() bytes, possibly unaligned.
  const uint8_t* tensor_bytes(const std::string& name) const;
  // The `__metadata__` map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // File offset of the data region: 8 + header length.
  uint64_t data_offset() const { return data_offset_; }

 private:
  std::string path_;
  std::shared_ptr<void> owner_;
  const uint8_t* data_ = nullptr;  // first byte of the data region
  uint64_t data_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;  // data order
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace zaya
