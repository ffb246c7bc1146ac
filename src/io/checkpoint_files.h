// CheckpointFiles: the tensors of a Hugging Face style checkpoint, across one or several safetensors
// files. A checkpoint is a directory holding `model.safetensors`, or `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor name: shard file}}) with its shards; a path to either
// file works too. All files are memory-mapped; tensors are views (see safetensors.h).
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/safetensors.h"

namespace zaya {

// The parsed content of model.safetensors.index.json.
struct CheckpointIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file (relative to the index)
  uint64_t total_size = 0;                        // metadata.total_size, 0 when absent
};

// Parses index JSON `text`; `index_path` names the file in errors. Requires an object with a
// "weight_map" object of strings; "metadata" is optional but must be an object, and its "total_size"
// (when present) a non-negative integer. Shard names must be relative paths without "..".
CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& index_path);

class CheckpointFiles {
 public:
  // Opens a checkpoint directory (model.safetensors preferred, as transformers does, else the index),
  // a `*.safetensors` file, or a `*.index.json` file. With an index, every shard is opened once, each
  // weight_map name must exist in its shard, and every tensor of a shard must be in the weight_map
  // for that shard (so no tensor appears in two shards). Errors name the index / shard / tensor.
  static CheckpointFiles open(const std::string& dir_or_file);

  // The path that was resolved: the single file or the index file.
  const std::string& source() const { return source_; }
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return where_.size(); }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const { return file_of(name).info(name); }
  Tensor tensor(const std::string& name) const { return file_of(name).tensor(name); }
  // The file holding tensor `name` (throws naming the checkpoint when absent).
  const SafetensorsFile& file_of(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // `__metadata__` of the first file (shards written together carry the same metadata).
  const std::map<std::string, std::string>& metadata() const;

 private:
  static CheckpointFiles open_index(const std::string& index_path);

  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace zaya
