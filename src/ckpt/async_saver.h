// Asynchronous checkpoint writes: the only training stall is a copy of the state into a host staging buffer;
// background threads then checksum it and write it with large aligned writes (O_DIRECT where the file system
// takes it) while training goes on. At most one save is in flight: starting another waits for the first.
//
// The file written is exactly write_rank_part's (checkpoint.h): <dir>/rank_<r>.bin with every tensor 64-byte
// aligned, then the sidecar <dir>/rank_<r>.json, both fsynced. The cross-rank commit (manifest + COMPLETE) is
// the caller's, once every rank's write finished (ckpt::commit on rank 0).
//
// Memory: the staging buffer is as large as the rank's saved state (its parameter shards + optimizer shards),
// kept between saves so that later copies touch no new pages. reserve() allocates and pre-faults it ahead of
// the first save.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"

namespace zaya::ckpt {

struct AsyncSaveOptions {
  int io_threads = 4;                     // concurrent pwrite streams (the device queue depth, not CPU work)
  size_t chunk_bytes = size_t(16) << 20;  // one pwrite; a multiple of 4096
  bool direct = true;  // O_DIRECT when the file system allows it (tmpfs does not: buffered)
};

// Figures of the last finished save.
struct AsyncSaveStats {
  double stage_s = 0;   // the stall: waiting for a previous save + laying out + copying into staging
  double write_s = 0;   // background: checksums + writes + fsync of the data file and sidecar
  size_t bytes = 0;     // the data file's size
  bool direct = false;  // written with O_DIRECT
};

class AsyncSaver {
 public:
  explicit AsyncSaver(AsyncSaveOptions opt = {});
  ~AsyncSaver();  // waits for the write in flight (its error, if any, is dropped: call wait() to see it)
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Allocates the staging buffer for `bytes` and touches every page, so that the first save's copy is as
  // fast as later ones. Optional.
  void reserve(size_t bytes);

  // The file size `tensors` need (the layout of rank_<r>.bin).
  static size_t layout_bytes(const std::vector<TensorEntry>& tensors);

  // Waits for the previous save (if any), copies every tensor's bytes into staging (OpenMP-parallel) and
  // starts the background write of <dir>/rank_<rank>.bin + sidecar. Creates `dir`. On return the tensors may
  // change. Returns the seconds this call took (the stall).
  double start(const std::string& dir, int rank, const std::vector<TensorEntry>& tensors);

  // True when no write is in flight (the last one finished, successfully or not). Never blocks.
  bool idle() const;

  // Blocks until the write in flight (if any) finished. Returns "" on success or when none was started since
  // the last wait(), else the error naming the file (e.g. "<dir>/rank_00000.bin: write failed (No space
  // left on device)"). A failed save leaves a partial directory without a manifest: never loadable.
  std::string wait();

  const AsyncSaveStats& last_stats() const { return stats_; }

 private:
  struct Layout {
    std::vector<size_t> offset;  // per tensor
    size_t size = 0;             // the file's size
  };
  void run_write(std::string dir, int rank, Layout layout, std::vector<TensorEntry> meta);
  void ensure_capacity(size_t bytes);

  AsyncSaveOptions opt_;
  uint8_t* staging_ = nullptr;  // mmap'ed, page-aligned (O_DIRECT needs aligned buffers), capacity_ bytes
  size_t capacity_ = 0;
  std::thread writer_;
  std::atomic<bool> busy_{false};
  std::mutex mu_;
  std::string error_;  // guarded by mu_
  AsyncSaveStats stats_, pending_stats_;
};

}  // namespace zaya::ckpt
