#include "ckpt/async_saver.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/direct_io.h"

namespace zaya::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kTensorAlign = 64;  // every tensor starts on a cache line (the file format, checkpoint.h)
constexpr size_t kCopyPiece = size_t(4) << 20;  // the unit of the parallel staging copy

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// memcpy into a 64-byte aligned destination with non-temporal stores: the staging buffer is not read again
// by this thread, so bypassing the cache saves the read-for-ownership of every destination line (measured
// ~20 GB/s vs memcpy's ~10 GB/s on 2 threads here: the copy is the training stall).
void copy_streaming(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__AVX512F__)
  ZAYA_ASSERT(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "staging pieces start on cache lines");
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();  // the streamed stores are visible before the writer thread reads the buffer
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace

AsyncSaver::AsyncSaver(AsyncSaveOptions opt) : opt_(opt) {
  ZAYA_ASSERT(opt_.io_threads >= 1, "at least one writer stream");
  ZAYA_ASSERT(opt_.chunk_bytes % kDirectIoAlign == 0 && opt_.chunk_bytes > 0, "chunks are whole blocks");
}

AsyncSaver::~AsyncSaver() {
  if (writer_.joinable()) writer_.join();
  if (staging_) ::munmap(staging_, capacity_);
}

void AsyncSaver::ensure_capacity(size_t bytes) {
  bytes = round_up(std::max<size_t>(bytes, 1), kDirectIoAlign);
  if (bytes <= capacity_) return;
  if (staging_) ::munmap(staging_, capacity_);
  staging_ = nullptr;
  capacity_ = 0;
  // MAP_POPULATE faults every page in now, so that the copies into it never page-fault (the stall).
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  ZAYA_CHECK(p != MAP_FAILED, "checkpoint staging buffer: cannot allocate ", bytes, " bytes (",
             std::strerror(errno), ")");
  staging_ = static_cast<uint8_t*>(p);
  capacity_ = bytes;
}

void AsyncSaver::reserve(size_t bytes) {
  wait();
  ensure_capacity(bytes);
}

size_t AsyncSaver::layout_bytes(const std::vector<TensorEntry>& tensors) {
  size_t off = 0;
  for (const TensorEntry& t : tensors) off = round_up(off, kTensorAlign) + t.data.nbytes();
  return off;
}

bool AsyncSaver::idle() const {
  return !busy_.load(std::memory_order_acquire);
}

std::string AsyncSaver::wait() {
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = pending_stats_;
  std::string e = std::move(error_);
  error_.clear();
  return e;
}

double AsyncSaver::start(const std::string& dir, int rank, const std::vector<TensorEntry>& tensors) {
  const auto t0 = clock_type::now();
  // At most one save in flight. An error of the previous one was the caller's to collect with wait(); one not
  // collected is dropped here (the caller then never committed that save).
  wait();
  Layout layout;
  for (const TensorEntry& t : tensors) {
    ZAYA_ASSERT(t.data.defined() || t.data.nbytes() == 0, "a saved tensor has data");
    layout.size = round_up(layout.size, kTensorAlign);
    layout.offset.push_back(layout.size);
    layout.size += t.data.nbytes();
  }
  const size_t padded = round_up(layout.size, kDirectIoAlign);
  ensure_capacity(padded);

  // The copy: every tensor cut into pieces of at most kCopyPiece bytes, copied by all threads; the alignment
  // gaps and the tail padding are zeroed so that the file's bytes are deterministic.
  struct Piece {
    uint8_t* dst;
    const uint8_t* src;
    size_t n;
  };
  std::vector<Piece> pieces;
  std::vector<TensorEntry> meta;
  size_t prev_end = 0;
  for (size_t i = 0; i < tensors.size(); i++) {
    const TensorEntry& t = tensors[i];
    const size_t off = layout.offset[i], n = t.data.nbytes();
    std::memset(staging_ + prev_end, 0, off - prev_end);
    const uint8_t* src = static_cast<const uint8_t*>(t.data.data);
    for (size_t b = 0; b < n; b += kCopyPiece)
      pieces.push_back({staging_ + off + b, src + b, std::min(kCopyPiece, n - b)});
    prev_end = off + n;
    TensorEntry m = t;
    m.data = Tensor::view(t.data.dtype, t.data.shape, staging_ + off, nullptr);
    meta.push_back(std::move(m));
  }
  std::memset(staging_ + prev_end, 0, padded - prev_end);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < int64_t(pieces.size()); i++)
    copy_streaming(pieces[size_t(i)].dst, pieces[size_t(i)].src, pieces[size_t(i)].n);

  fs::create_directories(dir);
  busy_.store(true, std::memory_order_release);
  writer_ = std::thread(&AsyncSaver::run_write, this, dir, rank, std::move(layout), std::move(meta));
  const double stall = seconds_since(t0);
  std::lock_guard<std::mutex> lock(mu_);
  pending_stats_.stage_s = stall;
  return stall;
}

// The background part: checksums over the staging copy, the data file in chunks from io_threads streams,
// truncation to the exact size (the writes cover whole blocks), fsync, then the sidecar.
void AsyncSaver::run_write(std::string dir, int rank, Layout layout, std::vector<TensorEntry> meta) {
  const auto t0 = clock_type::now();
  const std::string bin = rank_file_name(rank, "bin");
  const std::string path = (fs::path(dir) / bin).string();
  bool direct = false;
  std::string err =
      write_file_direct(path, staging_, layout.size, opt_.direct, &direct, opt_.io_threads, opt_.chunk_bytes);
  json list = json::array();
  if (err.empty()) {
    for (size_t i = 0; i < meta.size(); i++) {
      const TensorEntry& t = meta[i];
      const size_t n = t.data.nbytes();
      json e = {{"name", t.name},        {"owner", rank},
                {"file", bin},           {"offset", layout.offset[i]},
                {"nbytes", n},           {"dtype", dtype_name(t.data.dtype)},
                {"shape", t.data.shape}, {"xxh3", xxh3_hex(t.data.data, n)}};
      if (!t.whole.empty()) {
        e["whole_shape"] = t.whole;
        e["begin"] = t.begin;
      }
      list.push_back(std::move(e));
    }
    try {
      json side = {{"file", bin}, {"size", layout.size}, {"tensors", list}};
      write_file_synced((fs::path(dir) / rank_file_name(rank, "json")).string(), side.dump());
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = err;
    pending_stats_.write_s = seconds_since(t0);
    pending_stats_.bytes = layout.size;
    pending_stats_.direct = direct;
  }
  busy_.store(false, std::memory_order_release);
}

}  // namespace zaya::ckpt
