#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <ostream>

#include "core/error.h"
#include "io/mapped_file.h"
#include "io/strict_json.h"

namespace zaya {

namespace {

// Reads a JSON value as a non-negative integer that fits in `max`; false otherwise (floats, negative
// numbers, strings, ... are all rejected: a shape or offset must be an exact count).
bool json_to_u64(const nlohmann::json& v, uint64_t max, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = uint64_t(v.get<int64_t>());
  } else {
    return false;
  }
  return *out <= max;
}

// "safetensors file 'f': tensor 't'", formatted only when an error message needs it.
struct EntryWhere {
  const std::string& file_where;
  const std::string& name;
};
std::ostream& operator<<(std::ostream& os, const EntryWhere& w) {
  return os << w.file_where << ": tensor '" << w.name << "'";
}

// Parses one tensor entry {"dtype", "shape", "data_offsets"}; `file_where` prefixes error messages.
TensorInfo parse_entry(const std::string& file_where, const std::string& name, const nlohmann::json& entry,
                       uint64_t data_size) {
  const EntryWhere where{file_where, name};
  ZAYA_CHECK(entry.is_object(), where, ": entry is ", json_type_phrase(entry),
             ", expected an object with dtype, shape and data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    ZAYA_CHECK(entry.contains(field), where, ": missing field '", field, "'");
  }
  for (const auto& [key, value] : entry.items()) {
    ZAYA_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", where, ": unexpected field '", key,
               "' (expected only dtype, shape, data_offsets)");
  }
  TensorInfo info;
  info.name = name;

  const nlohmann::json& dtype = entry["dtype"];
  ZAYA_CHECK(dtype.is_string(), where, ": field 'dtype' is ", json_type_phrase(dtype), ", expected a string");
  ZAYA_CHECK(dtype_from_name(dtype.get<std::string>(), &info.dtype), where, ": unsupported dtype '",
             dtype.get<std::string>(), "' (supported: F32, BF16, F16, I32, I64, U8, U32)");

  const nlohmann::json& shape = entry["shape"];
  ZAYA_CHECK(shape.is_array(), where, ": field 'shape' is ", json_type_phrase(shape),
             ", expected an array of non-negative integers");
  // The product of the non-zero dims must fit in int64, so that shape_numel() (which multiplies
  // in order) can never overflow, whatever the order or the zeros.
  const uint64_t kMaxCount = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t nonzero_product = 1;
  bool has_zero_dim = false;
  for (size_t i = 0; i < shape.size(); i++) {
    uint64_t d = 0;
    ZAYA_CHECK(json_to_u64(shape[i], kMaxCount, &d), where, ": shape[", i, "] is ",
               json_type_phrase(shape[i]), ", expected a non-negative integer below 2^63");
    info.shape.push_back(int64_t(d));
    if (d == 0) {
      has_zero_dim = true;
      continue;
    }
    ZAYA_CHECK(!__builtin_mul_overflow(nonzero_product, d, &nonzero_product) && nonzero_product <= kMaxCount,
               where, ": shape ", shape_str(info.shape), "... overflows (more than 2^63 elements)");
  }
  uint64_t numel = has_zero_dim ? 0 : nonzero_product;
  uint64_t expected_bytes = 0;
  ZAYA_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(info.dtype)), &expected_bytes), where,
             ": shape ", shape_str(info.shape), " of ", dtype_name(info.dtype), " overflows the byte size");

  const nlohmann::json& offsets = entry["data_offsets"];
  ZAYA_CHECK(offsets.is_array() && offsets.size() == 2, where, ": field 'data_offsets' is ",
             json_type_phrase(offsets), ", expected [begin, end]");
  const uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
  ZAYA_CHECK(json_to_u64(offsets[0], kMaxU64, &info.begin) && json_to_u64(offsets[1], kMaxU64, &info.end),
             where, ": data_offsets ", offsets.dump(), " are not two non-negative integers");
  ZAYA_CHECK(info.begin <= info.end, where, ": data_offsets [", info.begin, ", ", info.end,
             "] are not ascending (begin > end)");
  ZAYA_CHECK(info.end <= data_size, where, ": data_offsets end ", info.end, " is beyond the data region (",
             data_size, " bytes)");
  ZAYA_CHECK(info.end - info.begin == expected_bytes, where, ": data_offsets [", info.begin, ", ", info.end,
             "] hold ", info.end - info.begin, " bytes but shape ", shape_str(info.shape), " of ",
             dtype_name(info.dtype), " needs ", expected_bytes);
  return info;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<MappedFile> file = MappedFile::open(path, /*populate=*/true);
  return parse(file->data(), file->size(), path, file);
}

SafetensorsFile SafetensorsFile::parse(const uint8_t* bytes, size_t size, const std::string& name,
                                       std::shared_ptr<void> owner) {
  const std::string where = str_cat("safetensors file '", name, "'");
  ZAYA_CHECK(size >= 8, where, ": ", size, " bytes is too short for the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];  // little-endian
  ZAYA_CHECK(header_len <= kSafetensorsMaxHeaderBytes, where, ": header length ", header_len,
             " is absurd (more than 100 MB); not a safetensors file?");
  ZAYA_CHECK(header_len <= size - 8, where, ": header length ", header_len, " is larger than the file (",
             size, " bytes)");

  SafetensorsFile out;
  out.path_ = name;
  out.owner_ = std::move(owner);
  out.data_offset_ = 8 + header_len;
  out.data_ = bytes + out.data_offset_;
  out.data_size_ = size - out.data_offset_;

  nlohmann::json header =
      parse_json_strict(reinterpret_cast<const char*>(bytes + 8), size_t(header_len), where + ": header");
  ZAYA_CHECK(header.is_object(), where, ": header is ", json_type_phrase(header), ", expected a JSON object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      ZAYA_CHECK(value.is_object(), where, ": field '__metadata__' is ", json_type_phrase(value),
                 ", expected an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        ZAYA_CHECK(mvalue.is_string(), where, ": field '__metadata__' key '", mkey, "' is ",
                   json_type_phrase(mvalue), ", expected a string");
        out.metadata_[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    out.tensors_.push_back(parse_entry(where, key, value, out.data_size_));
  }

  // Data order; then no two non-empty tensors may share a byte (a hostile file could alias a tensor
  // that another consumer writes a copy of, or inflate its apparent size).
  std::sort(out.tensors_.begin(), out.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : (a.end != b.end ? a.end < b.end : a.name < b.name);
  });
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : out.tensors_) {
    if (t.nbytes() == 0) continue;
    ZAYA_CHECK(previous == nullptr || t.begin >= previous->end, where, ": tensor '", t.name, "' bytes [",
               t.begin, ", ", t.end, ") overlap tensor '", previous->name, "' bytes [", previous->begin, ", ",
               previous->end, ")");
    previous = &t;
  }
  for (size_t i = 0; i < out.tensors_.size(); i++) out.index_[out.tensors_[i].name] = i;
  return out;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) names.push_back(t.name);
  return names;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  ZAYA_CHECK(it != index_.end(), "safetensors file '", path_, "' has no tensor '", name, "'");
  return tensors_[it->second];
}

const uint8_t* SafetensorsFile::tensor_bytes(const std::string& name) const {
  return data_ + info(name).begin;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  const uint8_t* bytes = data_ + t.begin;
  if (reinterpret_cast<uintptr_t>(bytes) % dtype_size(t.dtype) == 0) {
    // The mapping is read-only; Tensor has no const view, so the constness is documented instead.
    return Tensor::view(t.dtype, t.shape, const_cast<uint8_t*>(bytes), owner_);
  }
  // Misaligned (a foreign writer): an aligned copy, so typed access through the Tensor is valid.
  Tensor copy = Tensor::empty(t.dtype, t.shape);
  if (t.nbytes() > 0) std::memcpy(copy.data, bytes, t.nbytes());
  return copy;
}

}  // namespace zaya
