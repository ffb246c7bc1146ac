// Writers for the safetensors format, byte-compatible with the Hugging Face writer: the header is
// compact JSON with `__metadata__` first (keys sorted) and tensors in data order, which is descending
// dtype alignment then name (so every tensor is aligned to its element size); the header is padded
// with spaces to a multiple of 8 bytes; tensors are packed back to back.
//
// Every file is written to "<final>.tmp.<pid>" in the destination directory and flushed with fsync;
// only when all files of a checkpoint are complete are they renamed over their final names (shards
// first, the index last). A reader sees old or new files, never a torn one, and a failure part-way
// (a throwing fill, a full disk) leaves the directory as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace zaya {

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;

  uint64_t nbytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }
};

using SafetensorsMetadata = std::map<std::string, std::string>;

// Fills the `spec.nbytes()` bytes at `dst` (aligned to the element size) with tensor `spec`'s data.
using TensorFill = std::function<void(const TensorSpec& spec, void* dst)>;

// Writes `tensors` (name, tensor) to the safetensors file `path`. Names must be unique and valid
// UTF-8; `metadata` becomes `__metadata__` (omitted when empty). Throws zaya::Error naming the path.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const SafetensorsMetadata& metadata = {});

// Streams a checkpoint to directory `dir` (created if missing) without holding it in memory: each
// output file is mapped and `fill` is called once per tensor with the destination bytes in the file.
// Shards are planned in the order of `specs`: a new shard starts when the next tensor would push the
// current one past `max_shard_bytes` of tensor data (a tensor larger than that gets a shard alone).
// One shard: `dir/model.safetensors`. Several: `dir/model-00001-of-0000K.safetensors`, ... plus
// `dir/model.safetensors.index.json` {"metadata": {"total_size": bytes}, "weight_map": {name: file}}.
// `metadata` goes into every file's `__metadata__`. After success, files of the other layout from a
// previous save (model.safetensors / the index / model-*-of-*.safetensors not written now) are
// removed so the directory holds one consistent checkpoint. Returns the file names written (the
// index last when there is one). If `fill` throws, nothing in `dir` changes and the error propagates.
std::vector<std::string> write_safetensors_sharded(const std::string& dir,
                                                   const std::vector<TensorSpec>& specs,
                                                   const TensorFill& fill, uint64_t max_shard_bytes,
                                                   const SafetensorsMetadata& metadata = {});

// The shard plan used above: groups of indices into `specs`, in order.
std::vector<std::vector<size_t>> plan_safetensors_shards(const std::vector<TensorSpec>& specs,
                                                         uint64_t max_shard_bytes);

// HF shard file name: shard_file_name(0, 4) == "model-00001-of-00004.safetensors".
std::string shard_file_name(size_t index, size_t count);

}  // namespace zaya
