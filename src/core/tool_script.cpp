#include "core/tool_script.h"

#include <filesystem>

namespace zaya {

std::string find_tool_script(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const fs::path& p : {exe.parent_path() / name, exe.parent_path() / ".." / "tools" / name})
    if (fs::exists(p, ec)) return p.lexically_normal().string();
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

}  // namespace zaya
