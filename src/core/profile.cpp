#include "core/profile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace zaya {

namespace {
struct Table {
  std::mutex mu;
  std::map<std::string, std::pair<double, long>> rows;
  ~Table() {
    if (rows.empty()) return;
    double total = 0;
    for (const auto& [n, r] : rows) total += r.first;
    std::fprintf(stderr, "\nprofile (ZAYA_PROFILE=1): stage, seconds, calls, share of the timed total\n");
    for (const auto& [n, r] : rows)
      std::fprintf(stderr, "  %-24s %9.3f s %8ld  %5.1f%%\n", n.c_str(), r.first, r.second,
                   100 * r.first / total);
  }
};
Table& table() {
  static Table t;
  return t;
}
}  // namespace

bool profile_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("ZAYA_PROFILE");
    return e && *e && *e != '0';
  }();
  return on;
}

namespace {
std::atomic<bool> g_paused{false};
}

void profile_pause(bool paused) {
  g_paused.store(paused, std::memory_order_relaxed);
}

bool profile_paused() {
  return g_paused.load(std::memory_order_relaxed);
}

void profile_add(const char* name, double seconds) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto& r = t.rows[name];
  r.first += seconds;
  r.second++;
}

}  // namespace zaya
