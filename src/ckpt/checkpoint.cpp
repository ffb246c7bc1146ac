#include "ckpt/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckpt/async_saver.h"
#include "core/error.h"
#include "io/direct_io.h"

namespace zaya::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// 2: optimizer state saved as slices of whole parameter-shaped tensors (any world size loads it).
constexpr const char* kFormat = "zaya-train-checkpoint-2";

// An fd that is closed on scope exit; write_all / sync report errors naming the path.
struct File {
  int fd = -1;
  std::string path;
  File(const std::string& p, int flags) : path(p) {
    fd = ::open(p.c_str(), flags, 0644);
    ZAYA_CHECK(fd >= 0, p, ": cannot open (", std::strerror(errno), ")");
  }
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  void write_all(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      ZAYA_CHECK(w > 0, path, ": write failed (", std::strerror(errno), ")");
      p += w;
      n -= size_t(w);
    }
  }
  void sync() { ZAYA_CHECK(::fsync(fd) == 0, path, ": fsync failed (", std::strerror(errno), ")"); }
};

// Makes renames and new names in `dir` durable.
void sync_dir(const std::string& dir) {
  File d(dir, O_RDONLY | O_DIRECTORY);
  d.sync();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A non-negative integer field `key` of object `j` (bounded so that sizes and offsets never overflow).
int64_t count_field(const json& j, const char* key, const std::string& where) {
  ZAYA_CHECK(j.is_object() && j.contains(key), where, ": field '", key, "' is missing");
  const json& v = j[key];
  ZAYA_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t(1) << 50), where,
             ": field '", key, "' must be an integer in [0, 2^50), got ", v.dump());
  return v.get<int64_t>();
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  ZAYA_CHECK(j.is_object() && j.contains(key) && j[key].is_string(), where, ": field '", key,
             "' must be a string");
  return j[key].get<std::string>();
}

Shape shape_from(const json& j, const std::string& where) {
  ZAYA_CHECK(j.is_array() && j.size() <= 8, where, ": expected a shape array of at most 8 dimensions");
  Shape s;
  int64_t numel = 1;
  for (const auto& d : j) {
    ZAYA_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < (int64_t(1) << 40), where,
               ": bad dimension ", d.dump());
    s.push_back(d.get<int64_t>());
    numel = s.back() == 0 ? 0 : numel;
    ZAYA_CHECK(s.back() == 0 || numel <= (int64_t(1) << 44) / s.back(), where, ": shape too large");
    numel *= s.back();
  }
  return s;
}

}  // namespace

std::string rank_file_name(int rank, const char* ext) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.%s", rank, ext);
  return buf;
}

std::string xxh3_hex(const void* data, size_t n) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)XXH3_64bits(data, n));
  return buf;
}

void write_file_synced(const std::string& path, const std::string& text) {
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  f.write_all(text.data(), text.size());
  f.sync();
}

std::string step_dir(const std::string& root, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return (fs::path(root) / buf).string();
}

void remove_partial(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  ZAYA_CHECK(!ec, dir, ": cannot remove an earlier incomplete checkpoint (", ec.message(), ")");
}

void write_rank_part(const std::string& dir, int rank, const std::vector<TensorEntry>& tensors) {
  AsyncSaver saver;
  saver.start(dir, rank, tensors);
  const std::string err = saver.wait();
  ZAYA_CHECK(err.empty(), err);
}

void commit(const std::string& dir, int64_t step, int world, const json& state) {
  json tensors = json::array(), files = json::array();
  for (int r = 0; r < world; r++) {
    const std::string side_path = (fs::path(dir) / rank_file_name(r, "json")).string();
    json side = json::parse(read_text(side_path));
    files.push_back({{"file", side["file"]}, {"rank", r}, {"size", side["size"]}});
    for (auto& t : side["tensors"]) tensors.push_back(t);
  }
  json m = {{"format", kFormat}, {"step", step},   {"world", world},
            {"files", files},    {"state", state}, {"tensors", tensors}};
  const std::string manifest = (fs::path(dir) / "manifest.json").string();
  const std::string text = m.dump(1);
  write_file_synced(manifest + ".tmp", text);
  ZAYA_CHECK(std::rename((manifest + ".tmp").c_str(), manifest.c_str()) == 0, manifest, ": rename failed (",
             std::strerror(errno), ")");
  for (int r = 0; r < world; r++) fs::remove(fs::path(dir) / rank_file_name(r, "json"));
  sync_dir(dir);
  // The marker carries the manifest's checksum: a flipped byte in the manifest (its state, a size, an
  // offset) is detected like one in a data file.
  write_file_synced((fs::path(dir) / "COMPLETE").string(),
                    str_cat("step ", step, "\nmanifest xxh3 ", xxh3_hex(text.data(), text.size()), "\n"));
  sync_dir(dir);
  sync_dir(fs::path(dir).parent_path().string());
}

void check_checkpoint_dir(const std::string& dir, const std::string& what) {
  const fs::path p(dir);
  ZAYA_CHECK(fs::exists(p), what, " '", dir,
             "' does not exist (expected a checkpoint step directory, .../checkpoints/step_NNNNNNNN)");
  ZAYA_CHECK(fs::is_directory(p), what, " '", dir, "' is a file; expected a checkpoint step directory");
  if (fs::exists(p / "COMPLETE") || fs::exists(p / "manifest.json")) {
    ZAYA_CHECK(fs::exists(p / "COMPLETE"), dir,
               ": incomplete checkpoint (no COMPLETE marker: the save did not finish)");
    return;
  }
  if (fs::exists(p / "config.json")) {
    fail(str_cat(
        what, " '", dir,
        "' is a Hugging Face model directory, not a training checkpoint (to train from its weights use "
        "model.init_from in TRAIN.json; to run it, --model)"));
  }
  std::string newest;
  for (const auto& e : fs::directory_iterator(p)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name > newest) newest = name;
  }
  const bool resuming = what.rfind("--resume", 0) == 0;
  ZAYA_CHECK(newest.empty(), what, " '", dir,
             "' is a checkpoints root, not one checkpoint: pass a step directory (", (p / newest).string(),
             " is the newest)",
             resuming ? " or --resume auto (the newest that verifies under checkpoint.dir)" : "");
  ZAYA_CHECK(fs::exists(p / "COMPLETE"), dir,
             fs::is_empty(p) ? ": not a training checkpoint (an empty directory)"
                             : ": incomplete checkpoint (no COMPLETE marker: the save did not finish)");
}

Checkpoint Checkpoint::open(const std::string& dir) {
  check_checkpoint_dir(dir, "checkpoint");
  Checkpoint c;
  c.dir_ = dir;
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  ZAYA_CHECK(fs::exists(mpath), dir, ": manifest.json is missing");
  const std::string text = read_text(mpath);
  {
    const std::string marker = read_text((fs::path(dir) / "COMPLETE").string());
    const size_t at = marker.find("manifest xxh3 ");
    ZAYA_CHECK(at != std::string::npos && marker.size() >= at + 14 + 16, dir,
               "/COMPLETE: malformed completion marker (expected the manifest's checksum)");
    ZAYA_CHECK(marker.substr(at + 14, 16) == xxh3_hex(text.data(), text.size()), mpath,
               ": checksum mismatch with COMPLETE (the manifest or the marker is corrupted)");
  }
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(str_cat(mpath, ": not valid JSON (", e.what(), ")"));
  }
  try {
    ZAYA_CHECK(m.is_object() && m.value("format", "") == kFormat, mpath,
               ": not a checkpoint manifest of format ", kFormat);
    c.step_ = count_field(m, "step", mpath);
    c.world_ = int(count_field(m, "world", mpath));
    ZAYA_CHECK(c.world_ >= 1 && c.world_ < (1 << 20), mpath, ": bad world size ", c.world_);
    c.state_ = m.at("state");
    std::map<std::string, FileBytes> files;
    ZAYA_CHECK(m.at("files").is_array() && m.at("tensors").is_array(), mpath,
               ": 'files' and 'tensors' must be arrays");
    for (const auto& f : m.at("files")) {
      const std::string name = string_field(f, "file", mpath);
      // A plain file name inside the checkpoint's folder (an empty one or "." would name the folder itself).
      ZAYA_CHECK(!name.empty() && name != "." && name.find('/') == std::string::npos &&
                     name.find("..") == std::string::npos,
                 mpath, ": bad data file name '", name,
                 "' (expected a file name inside the checkpoint folder)");
      const std::string path = (fs::path(dir) / name).string();
      ZAYA_CHECK(fs::exists(path), path, ": data file is missing");
      ZAYA_CHECK(fs::is_regular_file(path), path, ": data file is not a regular file");
      const uint64_t want = uint64_t(count_field(f, "size", mpath));
      ZAYA_CHECK(fs::file_size(path) == want, path, ": size ", fs::file_size(path),
                 " bytes, the manifest says ", want, " (truncated or overwritten)");
      FileBytes fb = read_file_direct(path);  // fails if the size changes while it reads
      c.bytes_read_ += fb.size;
      c.files_.push_back(fb.data);
      files[name] = std::move(fb);
    }
    std::vector<std::string> want_xxh3;
    for (const auto& t : m.at("tensors")) {
      Entry e;
      e.name = string_field(t, "name", mpath);
      e.owner = int(count_field(t, "owner", mpath));
      const std::string where = str_cat(mpath, ": tensor ", e.name, " (rank ", e.owner, ")");
      auto it = files.find(string_field(t, "file", where));
      ZAYA_CHECK(it != files.end(), where, ": its file is not listed in 'files'");
      const uint64_t off = uint64_t(count_field(t, "offset", where)),
                     n = uint64_t(count_field(t, "nbytes", where));
      ZAYA_CHECK(off <= it->second.size && n <= it->second.size - off, where, ": bytes [", off, ", ", off + n,
                 ") lie outside its file of ", it->second.size, " bytes");
      DType dt;
      ZAYA_CHECK(dtype_from_name(string_field(t, "dtype", where), &dt), where, ": unknown dtype");
      Shape shape = shape_from(t.at("shape"), where);
      ZAYA_CHECK(uint64_t(shape_numel(shape)) * dtype_size(dt) == n, where, ": shape ", shape_str(shape),
                 " does not match its ", n, " bytes");
      want_xxh3.push_back(string_field(t, "xxh3", where));
      e.data = Tensor::view(dt, shape, it->second.data.get() + off, it->second.data);
      if (t.contains("whole_shape")) {
        e.whole = shape_from(t["whole_shape"], where);
        e.begin = count_field(t, "begin", where);
      } else {
        e.begin = 0;
      }
      c.entries_.push_back(std::move(e));
    }
    // Every checksum, on all threads; the first mismatch in manifest order is reported.
    std::vector<char> ok(c.entries_.size(), 1);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < int64_t(c.entries_.size()); i++) {
      const Tensor& d = c.entries_[size_t(i)].data;
      ok[size_t(i)] = xxh3_hex(d.data, d.nbytes()) == want_xxh3[size_t(i)];
    }
    for (size_t i = 0; i < ok.size(); i++)
      ZAYA_CHECK(ok[i], mpath, ": tensor ", c.entries_[i].name, " (rank ", c.entries_[i].owner,
                 "): checksum mismatch (the data file is corrupted)");
  } catch (const json::exception& e) {
    throw Error(str_cat(mpath, ": malformed manifest (", e.what(), ")"));
  } catch (const fs::filesystem_error& e) {
    throw Error(str_cat(mpath, ": cannot read a data file it lists (", e.what(), ")"));
  }
  c.manifest_ = std::move(m);
  return c;
}

std::vector<std::pair<std::string, Tensor>> Checkpoint::tensors_of(int owner) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Entry& e : entries_)
    if (e.owner == owner) out.emplace_back(e.name, e.data);
  return out;
}

bool Checkpoint::has(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return true;
  return false;
}

void Checkpoint::assemble(const std::string& name, DType dtype, const Shape& shape, void* dst) const {
  assemble_range(name, dtype, shape, 0, shape_numel(shape), dst);
}

void Checkpoint::assemble_range(const std::string& name, DType dtype, const Shape& shape, int64_t begin,
                                int64_t count, void* dst) const {
  const int64_t numel = shape_numel(shape), end = begin + count;
  ZAYA_ASSERT(0 <= begin && begin <= end && end <= numel, "the range lies inside the tensor");
  const size_t esize = dtype_size(dtype);
  int64_t covered = 0;
  bool found = false;
  for (const Entry& e : entries_) {
    if (e.name != name) continue;
    found = true;
    const std::string where = str_cat(dir_, ": tensor ", name, " (rank ", e.owner, ")");
    ZAYA_CHECK(e.data.dtype == dtype, where, ": dtype ", dtype_name(e.data.dtype), ", expected ",
               dtype_name(dtype));
    const Shape& whole = e.whole.empty() ? e.data.shape : e.whole;
    ZAYA_CHECK(whole == shape, where, ": shape ", shape_str(whole), ", expected ", shape_str(shape));
    ZAYA_CHECK(e.begin >= 0 && e.begin + e.data.numel() <= numel, where, ": slice outside the tensor");
    // The overlap of the saved slice [e.begin, e.begin + n) with the wanted range.
    const int64_t lo = std::max(begin, e.begin), hi = std::min(end, e.begin + e.data.numel());
    if (lo >= hi) continue;
    std::memcpy(static_cast<uint8_t*>(dst) + size_t(lo - begin) * esize,
                static_cast<const uint8_t*>(e.data.data) + size_t(lo - e.begin) * esize,
                size_t(hi - lo) * esize);
    covered += hi - lo;
  }
  ZAYA_CHECK(found, dir_, ": tensor ", name, " is not in the checkpoint");
  // Slices are disjoint by construction (one owner per element); the count catches a missing one.
  ZAYA_CHECK(covered == count, dir_, ": tensor ", name, ": the checkpoint holds ", covered, " of the ", count,
             " elements [", begin, ", ", end, ")");
}

std::vector<CheckpointListing> list_checkpoints(const std::string& root) {
  std::vector<CheckpointListing> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& d : fs::directory_iterator(root)) {
    const std::string name = d.path().filename().string();
    if (!d.is_directory() || name.size() != 13 || name.rfind("step_", 0) != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) continue;
    out.push_back({d.path().string(), std::stoll(name.substr(5)), fs::exists(d.path() / "COMPLETE")});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::unique_ptr<Checkpoint> open_latest(const std::string& root, std::vector<std::string>* skipped,
                                        const CheckpointFilter& consider) {
  auto list = list_checkpoints(root);
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    if (consider && !consider(it->dir)) continue;
    try {
      return std::make_unique<Checkpoint>(Checkpoint::open(it->dir));
    } catch (const Error& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return nullptr;
}

std::vector<std::string> apply_retention(const std::string& root, int64_t keep_last, int64_t keep_every,
                                         const CheckpointFilter& ours) {
  auto list = list_checkpoints(root);
  // Complete checkpoints outside the selection are not considered at all: another run's newer steps must
  // not push this run's own out of its newest keep_last.
  std::vector<bool> mine(list.size(), true);
  for (size_t i = 0; i < list.size(); i++)
    if (list[i].complete && ours) mine[i] = ours(list[i].dir);
  int64_t newest_complete = -1, complete_seen = 0;
  for (size_t i = 0; i < list.size(); i++)
    if (list[i].complete && mine[i]) newest_complete = std::max(newest_complete, list[i].step);
  std::vector<std::string> removed;
  for (size_t i = list.size(); i-- > 0;) {
    if (!mine[i]) continue;
    const CheckpointListing* it = &list[i];
    bool keep;
    if (it->complete) {
      keep = complete_seen < keep_last || (keep_every > 0 && it->step % keep_every == 0);
      complete_seen++;
    } else {
      keep = it->step > newest_complete;  // may still be being written
    }
    if (keep) continue;
    std::error_code ec;
    fs::remove_all(it->dir, ec);
    if (!ec) removed.push_back(it->dir);
  }
  return removed;
}

}  // namespace zaya::ckpt
