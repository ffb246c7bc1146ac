#include "io/checkpoint_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/strict_json.h"

namespace zaya {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_small_file(const std::string& path) {
  std::error_code ec;
  uintmax_t size = fs::file_size(path, ec);
  ZAYA_CHECK(!ec, "cannot read checkpoint index '", path, "': ", ec.message());
  ZAYA_CHECK(size <= kSafetensorsMaxHeaderBytes, "checkpoint index '", path, "' is ", size,
             " bytes, more than the 100 MB an index can plausibly need");
  std::ifstream in(path, std::ios::binary);
  ZAYA_CHECK(in.good(), "cannot open checkpoint index '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& index_path) {
  const std::string where = str_cat("checkpoint index '", index_path, "'");
  nlohmann::json root = parse_json_strict(text.data(), text.size(), where);
  ZAYA_CHECK(root.is_object(), where, " is ", json_type_phrase(root), ", expected a JSON object");
  CheckpointIndex index;
  if (root.contains("metadata")) {
    const nlohmann::json& metadata = root["metadata"];
    ZAYA_CHECK(metadata.is_object(), where, ": field 'metadata' is ", json_type_phrase(metadata),
               ", expected an object");
    if (metadata.contains("total_size")) {
      const nlohmann::json& total = metadata["total_size"];
      ZAYA_CHECK(total.is_number_unsigned() || (total.is_number_integer() && total.get<int64_t>() >= 0),
                 where, ": field 'metadata.total_size' is ", json_type_phrase(total),
                 ", expected a non-negative integer");
      index.total_size = total.get<uint64_t>();
    }
  }
  ZAYA_CHECK(root.contains("weight_map"), where, ": missing field 'weight_map'");
  const nlohmann::json& weight_map = root["weight_map"];
  ZAYA_CHECK(weight_map.is_object(), where, ": field 'weight_map' is ", json_type_phrase(weight_map),
             ", expected an object {tensor name: shard file}");
  for (const auto& [name, file] : weight_map.items()) {
    ZAYA_CHECK(file.is_string(), where, ": weight_map entry '", name, "' is ", json_type_phrase(file),
               ", expected a shard file name");
    const std::string& shard = file.get_ref<const std::string&>();
    ZAYA_CHECK(!shard.empty(), where, ": weight_map entry '", name, "' has an empty shard file name");
    fs::path p(shard);
    ZAYA_CHECK(p.is_relative(), where, ": weight_map entry '", name, "' names the absolute path '", shard,
               "'; shards must sit next to the index");
    for (const fs::path& part : p) {
      ZAYA_CHECK(part != "..", where, ": weight_map entry '", name, "' names '", shard,
                 "', which leaves the checkpoint directory");
    }
    index.weight_map[name] = shard;
  }
  return index;
}

CheckpointFiles CheckpointFiles::open(const std::string& dir_or_file) {
  std::error_code ec;
  fs::file_status st = fs::status(dir_or_file, ec);
  ZAYA_CHECK(fs::exists(st), "checkpoint '", dir_or_file, "' does not exist");
  std::string single, index;
  if (fs::is_directory(st)) {
    fs::path dir(dir_or_file);
    if (fs::exists(dir / "model.safetensors")) {
      single = (dir / "model.safetensors").string();
    } else if (fs::exists(dir / "model.safetensors.index.json")) {
      index = (dir / "model.safetensors.index.json").string();
    } else {
      fail(str_cat("checkpoint directory '", dir_or_file,
                   "' holds neither model.safetensors nor model.safetensors.index.json"));
    }
  } else if (ends_with(dir_or_file, ".json")) {
    index = dir_or_file;
  } else {
    single = dir_or_file;
  }

  if (!index.empty()) return open_index(index);
  CheckpointFiles out;
  out.source_ = single;
  out.files_.push_back(SafetensorsFile::open(single));
  for (const TensorInfo& t : out.files_[0].infos()) out.where_[t.name] = 0;
  return out;
}

CheckpointFiles CheckpointFiles::open_index(const std::string& index_path) {
  CheckpointIndex index = parse_checkpoint_index(read_small_file(index_path), index_path);
  const std::string where = str_cat("checkpoint index '", index_path, "'");
  ZAYA_CHECK(!index.weight_map.empty(), where, ": weight_map is empty");
  fs::path dir = fs::path(index_path).parent_path();

  // Shards in first-appearance order of the sorted weight_map (deterministic).
  std::vector<std::string> shard_names;
  std::map<std::string, size_t> shard_slot;
  for (const auto& [name, shard] : index.weight_map) {
    if (shard_slot.emplace(shard, shard_names.size()).second) shard_names.push_back(shard);
  }
  std::vector<SafetensorsFile> files;
  for (const std::string& shard : shard_names) {
    std::string path = (dir / shard).string();
    ZAYA_CHECK(fs::exists(path), where, ": shard '", shard, "' (", path, ") does not exist");
    files.push_back(SafetensorsFile::open(path));
  }
  std::unordered_map<std::string, size_t> where_map;
  for (const auto& [name, shard] : index.weight_map) {
    size_t slot = shard_slot[shard];
    ZAYA_CHECK(files[slot].has(name), where, ": tensor '", name, "' is mapped to shard '", shard,
               "', which does not contain it");
    where_map[name] = slot;
  }
  // Every tensor stored in a shard must be mapped to that shard: a tensor stored twice (or stray
  // data the index does not describe) makes the checkpoint ambiguous.
  for (size_t slot = 0; slot < files.size(); slot++) {
    for (const TensorInfo& t : files[slot].infos()) {
      auto it = index.weight_map.find(t.name);
      ZAYA_CHECK(it != index.weight_map.end(), where, ": shard '", shard_names[slot], "' holds tensor '",
                 t.name, "', which the weight_map does not list");
      ZAYA_CHECK(it->second == shard_names[slot], where, ": tensor '", t.name, "' appears in shard '",
                 shard_names[slot], "' and in shard '", it->second, "' (the weight_map names '", it->second,
                 "')");
    }
  }
  CheckpointFiles out;
  out.source_ = index_path;
  out.files_ = std::move(files);
  out.where_ = std::move(where_map);
  return out;
}

std::vector<std::string> CheckpointFiles::names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, slot] : where_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

const SafetensorsFile& CheckpointFiles::file_of(const std::string& name) const {
  auto it = where_.find(name);
  ZAYA_CHECK(it != where_.end(), "checkpoint '", source_, "' has no tensor '", name, "'");
  return files_[it->second];
}

const std::map<std::string, std::string>& CheckpointFiles::metadata() const {
  static const std::map<std::string, std::string> kNone;
  return files_.empty() ? kNone : files_[0].metadata();
}

}  // namespace zaya
