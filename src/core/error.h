// Errors: every failure the user can cause (bad file, bad field, bad request) is a zaya::Error with a
// message naming what was wrong and what was expected. Internal invariants use ZAYA_ASSERT with a reason.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace zaya {

struct Error : std::runtime_error {
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void format_to(std::ostringstream&) {}
template <typename T, typename... Rest>
void format_to(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  format_to(os, rest...);
}
}  // namespace detail

// Concatenates the arguments with operator<< : str_cat("layer ", i, " has ", n, " experts").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::format_to(os, args...);
  return os.str();
}

[[noreturn]] void fail(const std::string& msg);

}  // namespace zaya

// User-facing check: throws zaya::Error built from the message parts.
#define ZAYA_CHECK(cond, ...)                                \
  do {                                                       \
    if (!(cond)) ::zaya::fail(::zaya::str_cat(__VA_ARGS__)); \
  } while (0)

// Internal invariant: a broken one is a bug in zaya.cpp, so abort with file:line and the reason.
#define ZAYA_ASSERT(cond, reason)                                               \
  do {                                                                          \
    if (!(cond)) ::zaya::detail_assert_fail(#cond, reason, __FILE__, __LINE__); \
  } while (0)

namespace zaya {
[[noreturn]] void detail_assert_fail(const char* cond, const char* reason, const char* file, int line);
}
