#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace zaya {

namespace {

namespace fs = std::filesystem;

// Position of a dtype in the reference implementation's Dtype enum, which is ordered by increasing
// alignment (BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64).
// Files list tensors by descending rank, then by name: that order keeps every tensor aligned.
int alignment_rank(DType t) {
  switch (t) {
    case DType::U8:
      return 1;
    case DType::I8:
      return 2;
    case DType::F8_E4M3:
      return 4;
    case DType::F16:
      return 7;
    case DType::BF16:
      return 8;
    case DType::I32:
      return 9;
    case DType::U32:
      return 10;
    case DType::F32:
      return 11;
    case DType::I64:
      return 13;
    case DType::Q8_0:
    case DType::MXFP4:
      break;  // in-memory formats: files hold their parts (I8 / U8 elements, scales) as separate tensors
  }
  return 0;
}

// A JSON string literal (escaped); the name must be valid UTF-8.
std::string json_string(const std::string& s, const std::string& what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    fail(str_cat(what, " is not valid UTF-8"));
  }
}

// Checks names and shapes so that every byte size below is exact. `where` names the destination.
void validate_specs(const std::vector<TensorSpec>& specs, const std::string& where) {
  std::set<std::string> seen;
  for (const TensorSpec& s : specs) {
    ZAYA_CHECK(s.name != "__metadata__", where, ": '__metadata__' is reserved and cannot name a tensor");
    ZAYA_CHECK(seen.insert(s.name).second, where, ": tensor '", s.name, "' is listed twice");
    uint64_t numel = 1;
    for (int64_t d : s.shape) {
      ZAYA_CHECK(d >= 0, where, ": tensor '", s.name, "' has a negative dim in shape ", shape_str(s.shape));
      ZAYA_CHECK(!__builtin_mul_overflow(numel, uint64_t(d), &numel) &&
                     numel <= uint64_t(std::numeric_limits<int64_t>::max()),
                 where, ": tensor '", s.name, "' shape ", shape_str(s.shape), " overflows");
    }
    uint64_t bytes = 0;
    ZAYA_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(s.dtype)), &bytes), where, ": tensor '",
               s.name, "' shape ", shape_str(s.shape), " overflows the byte size");
  }
}

struct PlacedTensor {
  size_t spec_index;  // into the caller's specs
  uint64_t begin, end;
};

// Orders the tensors of one file like the reference writer and assigns their data offsets.
std::vector<PlacedTensor> place_tensors(const std::vector<TensorSpec>& specs, std::vector<size_t> members) {
  std::sort(members.begin(), members.end(), [&](size_t a, size_t b) {
    int ra = alignment_rank(specs[a].dtype), rb = alignment_rank(specs[b].dtype);
    return ra != rb ? ra > rb : specs[a].name < specs[b].name;
  });
  std::vector<PlacedTensor> placed;
  uint64_t offset = 0;
  for (size_t i : members) {
    placed.push_back({i, offset, offset + specs[i].nbytes()});
    offset += specs[i].nbytes();
  }
  return placed;
}

// The header JSON, padded with spaces to a multiple of 8 bytes so the data region is 8-byte aligned.
std::string header_json(const std::vector<TensorSpec>& specs, const std::vector<PlacedTensor>& placed,
                        const SafetensorsMetadata& metadata, const std::string& where) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) h += ",";
      first = false;
      h += json_string(key, str_cat(where, ": metadata key"));
      h += ":";
      h += json_string(value, str_cat(where, ": metadata value of '", key, "'"));
    }
    h += "}";
  }
  for (size_t i = 0; i < placed.size(); i++) {
    const TensorSpec& s = specs[placed[i].spec_index];
    if (h.size() > 1) h += ",";
    h += json_string(s.name, str_cat(where, ": a tensor name"));
    h += ":{\"dtype\":\"";
    h += dtype_name(s.dtype);
    h += "\",\"shape\":[";
    for (size_t d = 0; d < s.shape.size(); d++) {
      if (d > 0) h += ",";
      h += std::to_string(s.shape[d]);
    }
    h +=
        "],\"data_offsets\":[" + std::to_string(placed[i].begin) + "," + std::to_string(placed[i].end) + "]}";
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

std::string temp_name(const std::string& path) {
  return str_cat(path, ".tmp.", ::getpid());
}

// Flushes a directory so that renames inside it survive a crash.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the files themselves are already durable
  ::fsync(fd);
  ::close(fd);
}

// Owns a temporary output file while it is written; removes it unless kept.
struct TempOutput {
  std::string tmp_path;
  int fd = -1;
  uint8_t* map = nullptr;
  size_t map_size = 0;
  bool keep = false;

  ~TempOutput() {
    if (map != nullptr) ::munmap(map, map_size);
    if (fd >= 0) ::close(fd);
    if (!keep) ::unlink(tmp_path.c_str());
  }
};

// Complete, fsynced temporary files waiting to be renamed to their final names. Renaming happens
// only once every file of a checkpoint is written, so a failure part-way (a throwing fill, a full
// disk) leaves the directory exactly as it was; the destructor removes the uncommitted files.
struct PendingFiles {
  std::vector<std::pair<std::string, std::string>> tmp_and_final;
  bool committed = false;

  ~PendingFiles() {
    if (!committed)
      for (const auto& f : tmp_and_final) ::unlink(f.first.c_str());
  }
  void commit() {
    for (const auto& [tmp, final_path] : tmp_and_final) {
      ZAYA_CHECK(::rename(tmp.c_str(), final_path.c_str()) == 0, "cannot rename '", tmp, "' to '", final_path,
                 "': ", std::strerror(errno));
    }
    committed = true;
  }
};

// Writes one safetensors file for final name `path` into a temporary file (added to `pending`):
// header, then each placed tensor filled in place through a shared mapping of the output (large
// sequential writes by the kernel; no user-space copy of the checkpoint), then fsync.
void write_file(const std::string& path, const std::vector<TensorSpec>& specs,
                const std::vector<PlacedTensor>& placed, const SafetensorsMetadata& metadata,
                const std::function<void(size_t spec_index, void* dst)>& fill, PendingFiles* pending) {
  const std::string where = str_cat("writing safetensors file '", path, "'");
  const std::string header = header_json(specs, placed, metadata, where);
  const uint64_t data_bytes = placed.empty() ? 0 : placed.back().end;
  const uint64_t total = 8 + header.size() + data_bytes;

  TempOutput out;
  out.tmp_path = temp_name(path);
  out.fd = ::open(out.tmp_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZAYA_CHECK(out.fd >= 0, where, ": cannot create '", out.tmp_path, "': ", std::strerror(errno));
  // Reserve the blocks first: a full disk must be an error here, not a SIGBUS while filling the map.
  int rc = ::posix_fallocate(out.fd, 0, off_t(total));
  if (rc == EOPNOTSUPP || rc == EINVAL) rc = ::ftruncate(out.fd, off_t(total)) == 0 ? 0 : errno;
  ZAYA_CHECK(rc == 0, where, ": cannot reserve ", total, " bytes: ", std::strerror(rc));
  void* p = ::mmap(nullptr, size_t(total), PROT_READ | PROT_WRITE, MAP_SHARED, out.fd, 0);
  ZAYA_CHECK(p != MAP_FAILED, where, ": cannot mmap ", total, " bytes: ", std::strerror(errno));
  out.map = static_cast<uint8_t*>(p);
  out.map_size = size_t(total);

  uint64_t n = header.size();
  for (int i = 0; i < 8; i++) out.map[i] = uint8_t(n >> (8 * i));  // little-endian length
  std::memcpy(out.map + 8, header.data(), header.size());
  uint8_t* data = out.map + 8 + header.size();
  for (const PlacedTensor& t : placed) fill(t.spec_index, data + t.begin);

  ::munmap(out.map, out.map_size);
  out.map = nullptr;
  ZAYA_CHECK(::fsync(out.fd) == 0, where, ": fsync failed: ", std::strerror(errno));
  ::close(out.fd);
  out.fd = -1;
  pending->tmp_and_final.push_back({out.tmp_path, path});
  out.keep = true;
}

// Writes a small text file for final name `path` into a temporary file (added to `pending`).
void write_text_file(const std::string& path, const std::string& text, PendingFiles* pending) {
  TempOutput out;
  out.tmp_path = temp_name(path);
  out.fd = ::open(out.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZAYA_CHECK(out.fd >= 0, "cannot create '", out.tmp_path, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::write(out.fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    ZAYA_CHECK(w > 0, "cannot write '", out.tmp_path, "': ", std::strerror(errno));
    done += size_t(w);
  }
  ZAYA_CHECK(::fsync(out.fd) == 0, "fsync of '", out.tmp_path, "' failed: ", std::strerror(errno));
  ::close(out.fd);
  out.fd = -1;
  pending->tmp_and_final.push_back({out.tmp_path, path});
  out.keep = true;
}

bool is_shard_file_name(const std::string& f) {
  // model-NNNNN-of-NNNNN.safetensors
  if (f.size() != std::string("model-00001-of-00001.safetensors").size()) return false;
  if (f.compare(0, 6, "model-") != 0 || f.compare(11, 4, "-of-") != 0 ||
      f.compare(20, 12, ".safetensors") != 0)
    return false;
  for (size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19})
    if (f[i] < '0' || f[i] > '9') return false;
  return true;
}

// Removes checkpoint files of a previous save that the new one did not write.
void remove_stale_files(const std::string& dir, const std::set<std::string>& written) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string f = entry.path().filename().string();
    bool ours = f == "model.safetensors" || f == "model.safetensors.index.json" || is_shard_file_name(f);
    if (ours && !written.count(f)) fs::remove(entry.path(), ec);
  }
}

}  // namespace

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

std::vector<std::vector<size_t>> plan_safetensors_shards(const std::vector<TensorSpec>& specs,
                                                         uint64_t max_shard_bytes) {
  ZAYA_CHECK(max_shard_bytes > 0, "max_shard_bytes must be positive");
  std::vector<std::vector<size_t>> shards(1);
  uint64_t current = 0;
  for (size_t i = 0; i < specs.size(); i++) {
    uint64_t bytes = specs[i].nbytes();
    if (!shards.back().empty() && (current + bytes > max_shard_bytes || current + bytes < current)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += bytes;
  }
  return shards;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const SafetensorsMetadata& metadata) {
  const std::string where = str_cat("writing safetensors file '", path, "'");
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    specs.push_back({name, t.dtype, t.shape});
  }
  validate_specs(specs, where);
  for (const auto& [name, t] : tensors) {
    ZAYA_CHECK(t.data != nullptr || t.nbytes() == 0, where, ": tensor '", name, "' has no data");
  }
  std::vector<size_t> all(specs.size());
  for (size_t i = 0; i < all.size(); i++) all[i] = i;
  PendingFiles pending;
  write_file(
      path, specs, place_tensors(specs, all), metadata,
      [&](size_t i, void* dst) {
        if (specs[i].nbytes() > 0) std::memcpy(dst, tensors[i].second.data, specs[i].nbytes());
      },
      &pending);
  pending.commit();
  std::string dir = fs::path(path).parent_path().string();
  fsync_dir(dir.empty() ? "." : dir);
}

std::vector<std::string> write_safetensors_sharded(const std::string& dir,
                                                   const std::vector<TensorSpec>& specs,
                                                   const TensorFill& fill, uint64_t max_shard_bytes,
                                                   const SafetensorsMetadata& metadata) {
  const std::string where = str_cat("writing checkpoint '", dir, "'");
  validate_specs(specs, where);
  std::error_code ec;
  fs::create_directories(dir, ec);
  ZAYA_CHECK(fs::is_directory(dir), where, ": cannot create the directory: ", ec.message());

  std::vector<std::vector<size_t>> shards = plan_safetensors_shards(specs, max_shard_bytes);
  auto call_fill = [&](size_t i, void* dst) { fill(specs[i], dst); };
  std::vector<std::string> written;
  PendingFiles pending;
  if (shards.size() == 1) {
    written.push_back("model.safetensors");
    write_file((fs::path(dir) / written[0]).string(), specs, place_tensors(specs, shards[0]), metadata,
               call_fill, &pending);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total_size = 0;
    for (size_t s = 0; s < shards.size(); s++) {
      std::string file = shard_file_name(s, shards.size());
      write_file((fs::path(dir) / file).string(), specs, place_tensors(specs, shards[s]), metadata, call_fill,
                 &pending);
      for (size_t i : shards[s]) {
        weight_map[specs[i].name] = file;
        total_size += specs[i].nbytes();
      }
      written.push_back(file);
    }
    nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    written.push_back("model.safetensors.index.json");
    // Same layout as transformers' json.dumps(index, indent=2, sort_keys=True) + "\n".
    write_text_file((fs::path(dir) / written.back()).string(), index.dump(2, ' ', true) + "\n", &pending);
  }
  pending.commit();  // shards first, the index last
  fsync_dir(dir);
  remove_stale_files(dir, std::set<std::string>(written.begin(), written.end()));
  return written;
}

}  // namespace zaya
