// Helpers shared by the test binaries: locating test data, reading raw .bin dumps and JSON.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace zaya::test {

inline std::string source_dir() {
  return ZAYA_SOURCE_DIR;
}
inline std::string data_dir() {
  return source_dir() + "/tests/data";
}
inline std::string golden_dir() {
  return data_dir() + "/golden/zaya1_like";
}

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Runs a shell command line with stdout and stderr in `log`; the exit status, or -1 when it was signalled.
inline int run_shell(const std::string& cmd, const std::string& log) {
  const int st = std::system((cmd + " > '" + log + "' 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// max |a - b| over the entries where `keep` (nullable) is true; +inf when any compared entry is NaN or inf
// (a NaN never compares greater than the running max, so it must be caught explicitly).
inline double max_abs_diff(const float* a, const float* b, size_t n, const std::vector<bool>* keep = nullptr,
                           size_t row = 1) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    if (keep && !(*keep)[i / row]) continue;
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  }
  return m;
}

// Relative Frobenius difference ||a - b|| / ||b|| (fp64 sums); +inf when any entry is NaN or inf, and
// ||a - b|| itself when ||b|| is 0. Unlike a max-abs bound it weighs a tensor as a whole, so the
// summation-order noise of a few near-zero entries does not dominate it.
inline double rel_frobenius_diff(const float* a, const float* b, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    const double d = double(a[i]) - double(b[i]);
    diff += d * d;
    ref += double(b[i]) * double(b[i]);
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

// |a - b| / |b| (|a - b| when b is 0); +inf for a non-finite value.
inline double rel_diff(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
  return b != 0 ? std::fabs(a - b) / std::fabs(b) : std::fabs(a - b);
}

}  // namespace zaya::test
