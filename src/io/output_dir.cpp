#include "io/output_dir.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace zaya {

namespace fs = std::filesystem;

void check_output_dir(const std::string& dir, const std::string& what, bool overwrite,
                      const std::string& overwrite_flag) {
  std::error_code ec;
  if (overwrite || !fs::exists(dir, ec)) return;
  ZAYA_CHECK(fs::is_directory(dir, ec), what, " ", dir, ": exists and is not a directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string() + (e.is_directory(ec) ? "/" : ""));
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  std::string list;
  for (size_t i = 0; i < names.size() && i < 5; i++) list += (i ? ", " : "") + names[i];
  if (names.size() > 5) list += str_cat(" and ", names.size() - 5, " more");
  fail(str_cat(what, " ", dir, ": the directory is not empty (", list, "); choose a new directory, or pass ",
               overwrite_flag, " to replace what is there"));
}

std::vector<std::string> remove_model_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  static const char* kNames[] = {"config.json",    "generation_config.json", "model.safetensors.index.json",
                                 "tokenizer.json", "tokenizer_config.json",  "special_tokens_map.json"};
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool model_file =
        std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames) ||
        (e.is_regular_file() && name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0);
    if (model_file) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  for (const std::string& name : removed) fs::remove(fs::path(dir) / name);  // not while iterating
  return removed;
}

}  // namespace zaya
