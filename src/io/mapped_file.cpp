#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace zaya {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, bool populate) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZAYA_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(str_cat("cannot stat '", path, "': ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(str_cat("cannot map '", path, "': not a regular file"));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(st.st_size);
  if (file->size_ > 0) {
    // MAP_PRIVATE + PROT_READ: the checkpoint on disk can never be modified through a view.
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(str_cat("cannot mmap '", path, "' (", file->size_, " bytes): ", std::strerror(err)));
    }
    file->data_ = static_cast<uint8_t*>(p);
  }
  // The mapping keeps its own reference to the file; the descriptor is no longer needed.
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace zaya
