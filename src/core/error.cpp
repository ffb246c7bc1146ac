#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace zaya {

void fail(const std::string& msg) {
  throw Error(msg);
}

void detail_assert_fail(const char* cond, const char* reason, const char* file, int line) {
  std::fprintf(stderr, "zaya: internal error at %s:%d: assertion `%s` failed: %s\n", file, line, cond,
               reason);
  std::abort();
}

}  // namespace zaya
