// Reading a whole large file at the disk's speed: several streams of large O_DIRECT reads (no page-cache
// copy, the device queue kept busy) into one page-aligned buffer. Buffered reads when the file system refuses
// O_DIRECT (tmpfs). Used for training checkpoints (ckpt/checkpoint.h), whose data files are read once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zaya {

struct FileBytes {
  std::shared_ptr<uint8_t> data;  // page-aligned, owns the bytes (nullptr for an empty file)
  size_t size = 0;
  bool direct = false;  // read with O_DIRECT
};

// Reads the regular file at `path`. Throws zaya::Error naming the path and the errno text when it cannot be
// opened or read, or changes size while being read.
FileBytes read_file_direct(const std::string& path, int streams = 4, size_t chunk_bytes = size_t(16) << 20);

}  // namespace zaya
