// MappedFile: a whole file mapped read-only into memory (RAII over open/mmap/munmap). Checkpoint
// tensors are served as views into the mapping, so a MappedFile is always held by a shared_ptr that
// the views share as their owner: the mapping lives as long as any tensor that points into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zaya {

class MappedFile {
 public:
  // Maps the regular file at `path` read-only (PROT_READ, MAP_PRIVATE). An empty file gives
  // data() == nullptr and size() == 0. Throws zaya::Error naming the path and the errno text when the
  // file cannot be opened, is not a regular file, or cannot be mapped. `populate` maps every page now
  // (MAP_POPULATE, reading from disk what the page cache lacks): for model weights, whose first use would
  // otherwise pay a page fault per 4 KB (3 ms per ZAYA1-8B expert, inside a decode step).
  static std::shared_ptr<MappedFile> open(const std::string& path, bool populate = false);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The mapped bytes are read-only: writing through them faults. clone() a tensor to modify it.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace zaya
