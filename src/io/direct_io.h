// Large files at the disk's speed: several streams of large O_DIRECT requests (no page-cache copy, the
// device queue kept busy) to or from one page-aligned buffer; buffered I/O when the file system refuses
// O_DIRECT (tmpfs). Used for training checkpoints (ckpt/), whose data files are written and read once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zaya {

constexpr size_t kDirectIoAlign = 4096;  // O_DIRECT: buffer, offset and length multiples of the block size

struct FileBytes {
  std::shared_ptr<uint8_t> data;  // page-aligned, owns the bytes (nullptr for an empty file)
  size_t size = 0;
  bool direct = false;  // read with O_DIRECT
};

// Reads the regular file at `path`. Throws zaya::Error naming the path and the errno text when it cannot be
// opened or read, or changes size while being read.
FileBytes read_file_direct(const std::string& path, int streams = 4, size_t chunk_bytes = size_t(16) << 20);

// Writes `size` bytes of `buf` to `path` (created or truncated) in chunk_bytes requests from `streams`
// streams, with O_DIRECT when `try_direct` and the file system allows it (*direct says which), truncates the
// file to `size` and fsyncs it. `buf` is kDirectIoAlign-aligned and holds `size` rounded up to
// kDirectIoAlign bytes (the padding is written, then cut off). Never throws (it runs on writer threads):
// returns "" or the error naming the path and the errno text (e.g. "No space left on device").
std::string write_file_direct(const std::string& path, const uint8_t* buf, size_t size, bool try_direct,
                              bool* direct, int streams = 4, size_t chunk_bytes = size_t(16) << 20);

}  // namespace zaya
