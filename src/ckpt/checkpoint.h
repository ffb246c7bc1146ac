// Training checkpoints: one directory per step, written by every rank, committed atomically, verified by
// checksums before anything is loaded.
//
// Layout of <root>/step_<8-digit step>/:
//   rank_<5-digit rank>.bin   the tensors rank r owns, back to back, each 64-byte aligned (raw bytes)
//   manifest.json             every tensor: name, owner rank, file, byte offset, byte count, dtype, shape,
//                             xxh3-64 of its bytes (and, for a slice of a larger tensor, the whole shape and
//                             the first element); every file's size; step; world size; `state` (the caller's
//                             JSON: data-loader state, controller state, RNG states, the training config)
//   COMPLETE                  the completion marker, written last: "step <n>", "manifest xxh3 <hex>" (the
//                             manifest's own checksum)
// Commit order (why: a crash at any point leaves either a complete checkpoint or one that is visibly not):
// each rank writes and fsyncs its data file and a small sidecar listing its tensors; after a barrier rank 0
// merges the sidecars into manifest.json.tmp, fsyncs it, renames it to manifest.json, fsyncs the directory,
// then writes and fsyncs COMPLETE and the directory again. A directory without COMPLETE, a file whose size
// differs from the manifest's or a tensor whose checksum differs is never loaded.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zaya::ckpt {

// One tensor a rank saves. `data` is contiguous. When `whole` is non-empty, `data` holds the flat
// (row-major) elements [begin, begin + data.numel()) of a tensor of shape `whole` (a ZeRO-1 shard).
struct TensorEntry {
  std::string name;
  Tensor data;
  Shape whole;
  int64_t begin = 0;
};

// "rank_00003.bin" / "rank_00003.json": rank r's data file and the sidecar listing its tensors.
std::string rank_file_name(int rank, const char* ext);

// The 16-hex-digit xxh3-64 of `n` bytes, as the manifest stores it.
std::string xxh3_hex(const void* data, size_t n);

// Writes `text` to `path` and fsyncs it. Throws naming the path.
void write_file_synced(const std::string& path, const std::string& text);

// "<root>/step_00000042".
std::string step_dir(const std::string& root, int64_t step);

// Rank `rank`'s part of a checkpoint, synchronously: writes and fsyncs <dir>/rank_<r>.bin and its sidecar
// listing the tensors (names unique within the rank). Creates `dir`. Throws zaya::Error naming the file on
// I/O errors. (AsyncSaver, ckpt/async_saver.h, writes the same files in the background.)
void write_rank_part(const std::string& dir, int rank, const std::vector<TensorEntry>& tensors);

// Rank 0, after every rank's write_rank_part returned: the manifest (from the sidecars of ranks 0..world-1,
// plus step, world and `state`) and the completion marker, in the commit order above.
void commit(const std::string& dir, int64_t step, int world, const nlohmann::json& state);

// Removes an earlier, uncommitted attempt at `dir` (rank 0 before the ranks write).
void remove_partial(const std::string& dir);

// Checks that `dir` names one training checkpoint (a step directory) before anything is built or read, and
// otherwise says what it is instead and what to pass: it does not exist; it is a Hugging Face model
// directory (config.json + safetensors: model.init_from or --model take those); it is a checkpoints root
// holding step_* directories (pass one of them, e.g. the newest, or --resume auto); it has no COMPLETE marker
// (a save that did not finish). Throws zaya::Error; `what` names the flag or field ("--resume").
void check_checkpoint_dir(const std::string& dir, const std::string& what);

// A verified checkpoint in memory: every data file read and every tensor's checksum checked.
class Checkpoint {
 public:
  // Reads (io/direct_io.h: large O_DIRECT reads) and verifies `dir`. Throws zaya::Error naming the
  // directory and the first problem: no COMPLETE marker, a missing / malformed manifest, a missing or wrongly
  // sized data file, a tensor outside its file or whose xxh3 differs.
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  int64_t step() const { return step_; }
  int world() const { return world_; }
  const nlohmann::json& state() const { return state_; }
  const nlohmann::json& manifest() const { return manifest_; }
  size_t bytes_read() const { return bytes_read_; }  // data-file bytes read (and verified)

  // The tensors rank `owner` saved, whole or slice as saved (views into the loaded files).
  std::vector<std::pair<std::string, Tensor>> tensors_of(int owner) const;
  // Assembles tensor `name` of `dtype` and `shape` into `dst` from every entry of that name (a whole one, or
  // slices of any owners that together cover every element once). Throws naming the tensor otherwise.
  void assemble(const std::string& name, DType dtype, const Shape& shape, void* dst) const;
  // Elements [begin, begin + count) of the flat tensor `name` (whole shape `shape`) into `dst`, from
  // whichever saved slices overlap that range (resharding: the ranks that saved it need not be the ones
  // loading it). Throws naming the tensor when a dtype or shape differs or some element of the range is not
  // saved.
  void assemble_range(const std::string& name, DType dtype, const Shape& shape, int64_t begin, int64_t count,
                      void* dst) const;
  bool has(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    int owner;
    Tensor data;
    Shape whole;  // empty: whole tensor
    int64_t begin;
  };
  std::string dir_;
  int64_t step_ = 0;
  int world_ = 1;
  nlohmann::json state_, manifest_;
  std::vector<Entry> entries_;
  std::vector<std::shared_ptr<uint8_t>> files_;
  size_t bytes_read_ = 0;
};

struct CheckpointListing {
  std::string dir;
  int64_t step = 0;
  bool complete = false;  // has the COMPLETE marker (not yet verified)
};

// The step_<n> directories under `root`, ascending by step (empty when root does not exist).
std::vector<CheckpointListing> list_checkpoints(const std::string& root);

// Selects step directories by their path (e.g. those of one training run); an empty one selects all.
using CheckpointFilter = std::function<bool(const std::string& step_dir)>;

// The newest checkpoint under `root` (among those `consider` selects) that opens and verifies. Every newer
// one that does not is reported in `skipped` as "<dir>: <reason>" and never loaded. Returns nullptr when
// none verifies.
std::unique_ptr<Checkpoint> open_latest(const std::string& root, std::vector<std::string>* skipped,
                                        const CheckpointFilter& consider = {});

// Retention over the checkpoints `ours` selects (the others, e.g. another run's that share the directory,
// are neither removed nor counted): keeps the newest `keep_last` complete checkpoints and every one whose
// step is a multiple of `keep_every` (0 = none kept for that reason); removes the other complete ones, and
// every incomplete directory older than the newest complete one selected (a save cut short: never
// loadable). Returns the removed directories.
std::vector<std::string> apply_retention(const std::string& root, int64_t keep_last, int64_t keep_every,
                                         const CheckpointFilter& ours = {});

}  // namespace zaya::ckpt
