// The Python helper scripts the binary runs (tools/plot_train.py, tools/plot_bench_serve.py): where to find
// them, and how to put a path into a shell command.
#pragma once

#include <string>

namespace zaya {

// tools/NAME found from the running binary rather than the working directory: beside it (CMake copies the
// scripts next to build/zaya) or in <binary's directory>/../tools (a build directory inside the source tree).
// "" when neither exists.
std::string find_tool_script(const std::string& name);

// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s);

}  // namespace zaya
