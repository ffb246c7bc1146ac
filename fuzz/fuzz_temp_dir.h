// A per-process scratch directory for fuzz targets that must hand files to the code under test.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace zaya::fuzz {

// A fresh, empty <tmp>/<name>_<pid> (the pid: the sanitizer script and ctest run targets side by side),
// removed when the process exits normally. Call it once per name, from the target's one-time setup.
inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Constructed before the atexit handler is registered, so destroyed after it runs.
  static std::vector<fs::path> to_remove;
  if (to_remove.empty())
    std::atexit([] {
      std::error_code ec;  // never throw at exit
      for (const fs::path& d : to_remove) fs::remove_all(d, ec);
    });
  to_remove.push_back(dir);
  return dir.string();
}

}  // namespace zaya::fuzz
