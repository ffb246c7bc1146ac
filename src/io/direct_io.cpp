#include "io/direct_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "core/error.h"

namespace zaya {

namespace {

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// Transfers bytes [begin, end) at the same file offsets, looping over short transfers. A read stops at end of
// file (the last block is short). Returns "" or the errno text.
std::string transfer_range(int fd, uint8_t* buf, size_t begin, size_t end, bool write) {
  while (begin < end) {
    const ssize_t n = write ? ::pwrite(fd, buf + begin, end - begin, off_t(begin))
                            : ::pread(fd, buf + begin, end - begin, off_t(begin));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) return write ? "no progress (device full?)" : "";
    begin += size_t(n);
  }
  return "";
}

// Bytes [0, padded) in chunk_bytes pieces, stream s taking chunks s, s + streams, ...: large sequential
// requests, several in flight. Returns the first stream's error, or "".
std::string transfer_streams(int fd, uint8_t* buf, size_t padded, bool write, int streams,
                             size_t chunk_bytes) {
  const size_t nchunks = (padded + chunk_bytes - 1) / chunk_bytes;
  const int n = int(std::min<size_t>(size_t(streams), std::max<size_t>(nchunks, 1)));
  std::vector<std::string> errs(static_cast<size_t>(n));
  std::vector<std::thread> pool;
  for (int s = 0; s < n; s++)
    pool.emplace_back([&, s] {
      for (size_t c = size_t(s); c < nchunks && errs[size_t(s)].empty(); c += size_t(n))
        errs[size_t(s)] =
            transfer_range(fd, buf, c * chunk_bytes, std::min(padded, (c + 1) * chunk_bytes), write);
    });
  for (auto& t : pool) t.join();
  for (auto& e : errs)
    if (!e.empty()) return e;
  return "";
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

FileBytes read_file_direct(const std::string& path, int streams, size_t chunk_bytes) {
  ZAYA_ASSERT(streams >= 1 && chunk_bytes % kDirectIoAlign == 0 && chunk_bytes > 0, "whole-block chunks");
  FileBytes out;
  Fd f{::open(path.c_str(), O_RDONLY | O_DIRECT)};
  out.direct = f.fd >= 0;
  if (f.fd < 0) f.fd = ::open(path.c_str(), O_RDONLY);
  ZAYA_CHECK(f.fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  ZAYA_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), path, ": not a regular file");
  out.size = size_t(st.st_size);
  if (out.size == 0) return out;
  const size_t padded = round_up(out.size, kDirectIoAlign);
  void* p = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZAYA_CHECK(p != MAP_FAILED, path, ": cannot allocate ", padded, " bytes to read it (", std::strerror(errno),
             ")");
  out.data =
      std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [padded](uint8_t* q) { ::munmap(q, padded); });
  std::string err = transfer_streams(f.fd, out.data.get(), padded, false, streams, chunk_bytes);
  if (!err.empty() && out.direct && err == std::strerror(EINVAL)) {
    // Accepted O_DIRECT at open, refused the reads: read buffered.
    Fd b{::open(path.c_str(), O_RDONLY)};
    ZAYA_CHECK(b.fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
    out.direct = false;
    err = transfer_streams(b.fd, out.data.get(), padded, false, streams, chunk_bytes);
  }
  ZAYA_CHECK(err.empty(), path, ": read failed (", err, ")");
  struct stat st2;
  ZAYA_CHECK(::fstat(f.fd, &st2) == 0 && size_t(st2.st_size) == out.size, path,
             ": changed size while being read");
  return out;
}

std::string write_file_direct(const std::string& path, const uint8_t* buf, size_t size, bool try_direct,
                              bool* direct, int streams, size_t chunk_bytes) {
  ZAYA_ASSERT(streams >= 1 && chunk_bytes % kDirectIoAlign == 0 && chunk_bytes > 0, "whole-block chunks");
  ZAYA_ASSERT(reinterpret_cast<uintptr_t>(buf) % kDirectIoAlign == 0, "O_DIRECT needs an aligned buffer");
  uint8_t* bytes = const_cast<uint8_t*>(buf);  // only written from
  const size_t padded = round_up(size, kDirectIoAlign);
  Fd f;
  if (try_direct) f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  *direct = f.fd >= 0;
  if (f.fd < 0) f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (f.fd < 0) return str_cat(path, ": cannot open for writing (", std::strerror(errno), ")");
  std::string err = transfer_streams(f.fd, bytes, padded, true, streams, chunk_bytes);
  if (!err.empty() && *direct && err == std::strerror(EINVAL)) {
    // The file system accepted O_DIRECT at open but not these writes: write buffered instead.
    ::close(f.fd);
    f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    *direct = false;
    err = f.fd < 0 ? std::string(std::strerror(errno))
                   : transfer_streams(f.fd, bytes, padded, true, streams, chunk_bytes);
  }
  if (!err.empty()) return str_cat(path, ": write failed (", err, ")");
  if (::ftruncate(f.fd, off_t(size)) != 0)
    return str_cat(path, ": truncate failed (", std::strerror(errno), ")");
  if (::fsync(f.fd) != 0) return str_cat(path, ": fsync failed (", std::strerror(errno), ")");
  return "";
}

}  // namespace zaya
