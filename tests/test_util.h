// Helpers shared by the test binaries: locating test data, reading raw .bin dumps and JSON.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

// Every line of a JSON-lines file, parsed (a missing file gives none: the caller's size check reports it).
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// Runs a shell command line with stdout and stderr in `log`; the exit status, or -1 when it was signalled.
inline int run_shell(const std::string& cmd, const std::string& log) {
  const int st = std::system((cmd + " > '" + log + "' 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A fresh directory under the system temp dir (named by `tag` and the pid), removed with its contents when
// the object goes.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) {
    namespace fs = std::filesystem;
    path = (fs::temp_directory_path() / ("zaya_" + tag + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- numeric comparison: the one helper every numeric check goes through ----
//
// How far `got` is from `want`, element by element. A NaN or inf in either counts as infinitely wrong:
// max_abs and max_rel become +inf (a NaN never compares greater than a running max, and `err > tol` is
// false for a NaN err, so a hand-written loop passes NaN silently). `worst` is the index of the largest
// error (of the first non-finite entry when there is one). Entries where `keep` (nullable, one flag per
// `row` entries) is false are not compared.
struct Diff {
  double max_abs = 0;  // max |got_i - want_i|
  double scale = 0;    // max |want_i| over the compared entries
  double max_rel = 0;  // max_abs / scale (max_abs when scale is 0): the error relative to the tensor
  size_t worst = 0;    // index of the largest error
  double got_worst = 0, want_worst = 0;
  size_t non_finite = 0;  // entries where got or want is NaN / inf
  size_t compared = 0;
  // max_abs <= atol, or within rtol of the tensor's largest |want| (NaN: false).
  bool within(double atol, double rtol = 0) const { return max_abs <= std::max(atol, rtol * scale); }
  std::string str() const {
    std::ostringstream o;
    o.precision(4);
    o << "max abs error " << max_abs << " at " << worst << " (got " << got_worst << ", want " << want_worst
      << "), max |want| " << scale << ", relative " << max_rel << ", " << non_finite << " non-finite of "
      << compared;
    return o.str();
  }
};

template <typename T, typename U>
Diff diff(const T* got, const U* want, size_t n, const std::vector<bool>* keep = nullptr, size_t row = 1) {
  Diff d;
  for (size_t i = 0; i < n; i++) {
    if (keep && !(*keep)[i / row]) continue;
    d.compared++;
    const double g = double(got[i]), w = double(want[i]);
    if (!std::isfinite(g) || !std::isfinite(w)) {
      if (d.non_finite++ == 0) {
        d.worst = i;
        d.got_worst = g;
        d.want_worst = w;
      }
      continue;
    }
    d.scale = std::max(d.scale, std::fabs(w));
    const double e = std::fabs(g - w);
    if (e > d.max_abs && d.non_finite == 0) {
      d.max_abs = e;
      d.worst = i;
      d.got_worst = g;
      d.want_worst = w;
    }
  }
  if (d.non_finite) d.max_abs = INFINITY;
  d.max_rel = d.scale > 0 ? d.max_abs / d.scale : d.max_abs;
  return d;
}
template <typename T, typename U>
Diff diff(const std::vector<T>& got, const std::vector<U>& want) {
  if (got.size() != want.size()) {  // a size mismatch is as wrong as a NaN
    Diff d;
    d.max_abs = d.max_rel = INFINITY;
    d.non_finite = std::max(got.size(), want.size());
    return d;
  }
  return diff(got.data(), want.data(), got.size());
}

// max |a - b| over the entries where `keep` (nullable) is true; +inf when any compared entry is NaN or inf.
inline double max_abs_diff(const float* a, const float* b, size_t n, const std::vector<bool>* keep = nullptr,
                           size_t row = 1) {
  return diff(a, b, n, keep, row).max_abs;
}

// Relative Frobenius difference ||a - b|| / ||b|| (fp64 sums); +inf when any entry is NaN or inf, and
// ||a - b|| itself when ||b|| is 0. Unlike a max-abs bound it weighs a tensor as a whole, so the
// summation-order noise of a few near-zero entries does not dominate it.
template <typename T, typename U>
double rel_frobenius_diff(const T* a, const U* b, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(double(a[i])) || !std::isfinite(double(b[i]))) return INFINITY;
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

// |a - b|; +inf for a non-finite value (EXPECT_LE(abs_diff(a, b), tol) then fails on NaN).
inline double abs_diff(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
  return std::fabs(a - b);
}

// True when the tests run in CI (CI=true): a missing prerequisite is then a failure, not a skip.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && *ci && std::string(ci) != "0" && std::string(ci) != "false";
}

}  // namespace zaya::test

// Skips the test when a prerequisite is missing, except in CI (CI=true), where it fails naming it: a suite
// that is green because it checked nothing must not pass CI.
#define ZAYA_SKIP_UNLESS_CI(why)                                                  \
  do {                                                                            \
    if (::zaya::test::in_ci()) FAIL() << "prerequisite missing in CI: " << (why); \
    GTEST_SKIP() << (why);                                                        \
  } while (0)
