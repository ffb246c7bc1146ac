#include "io/direct_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace zaya {

namespace {

constexpr size_t kBlock = 4096;  // O_DIRECT: buffer, offset and length multiples of the logical block

// Reads [begin, end) of the file into buf + begin. Stops early at end of file. Returns "" or the errno text.
std::string pread_range(int fd, uint8_t* buf, size_t begin, size_t end) {
  while (begin < end) {
    ssize_t r = ::pread(fd, buf + begin, end - begin, off_t(begin));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) return "";  // end of file (the last block is short)
    begin += size_t(r);
  }
  return "";
}

}  // namespace

FileBytes read_file_direct(const std::string& path, int streams, size_t chunk_bytes) {
  ZAYA_ASSERT(streams >= 1 && chunk_bytes % kBlock == 0 && chunk_bytes > 0, "whole-block chunks");
  FileBytes out;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  out.direct = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY);
  ZAYA_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  ZAYA_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), path, ": not a regular file");
  out.size = size_t(st.st_size);
  if (out.size == 0) return out;
  const size_t padded = (out.size + kBlock - 1) / kBlock * kBlock;
  void* p = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZAYA_CHECK(p != MAP_FAILED, path, ": cannot allocate ", padded, " bytes to read it (", std::strerror(errno),
             ")");
  out.data =
      std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [padded](uint8_t* q) { ::munmap(q, padded); });

  auto read_all = [&](int rfd) -> std::string {
    const size_t nchunks = (padded + chunk_bytes - 1) / chunk_bytes;
    const int n = int(std::min<size_t>(size_t(streams), nchunks));
    std::vector<std::string> errs(static_cast<size_t>(n));
    std::vector<std::thread> pool;
    for (int s = 0; s < n; s++)
      pool.emplace_back([&, s] {
        for (size_t c = size_t(s); c < nchunks && errs[size_t(s)].empty(); c += size_t(n))
          errs[size_t(s)] =
              pread_range(rfd, out.data.get(), c * chunk_bytes, std::min(padded, (c + 1) * chunk_bytes));
      });
    for (auto& t : pool) t.join();
    for (auto& e : errs)
      if (!e.empty()) return e;
    return "";
  };
  std::string err = read_all(fd);
  if (!err.empty() && out.direct && err == std::strerror(EINVAL)) {
    // Accepted O_DIRECT at open, refused the reads: read buffered.
    const int bfd = ::open(path.c_str(), O_RDONLY);
    ZAYA_CHECK(bfd >= 0, path, ": cannot open (", std::strerror(errno), ")");
    Closer bcloser{bfd};
    out.direct = false;
    err = read_all(bfd);
  }
  ZAYA_CHECK(err.empty(), path, ": read failed (", err, ")");
  struct stat st2;
  ZAYA_CHECK(::fstat(fd, &st2) == 0 && size_t(st2.st_size) == out.size, path,
             ": changed size while being read");
  return out;
}

}  // namespace zaya
