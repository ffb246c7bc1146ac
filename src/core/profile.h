// Opt-in stage timers: set ZAYA_PROFILE=1 and every ZAYA_PROFILE_SCOPE("stage") accumulates wall time;
// the table prints to stderr at exit. Off by default (one branch on a cached flag per scope).
#pragma once

#include <chrono>

namespace zaya {

bool profile_enabled();
void profile_add(const char* name, double seconds);
// Pausing drops the scopes that start meanwhile (a benchmark times its decode steps, not its prefill).
void profile_pause(bool paused);
bool profile_paused();

struct ProfileScope {
  const char* name;
  std::chrono::steady_clock::time_point t0;
  bool on;
  explicit ProfileScope(const char* n) : name(n), on(profile_enabled() && !profile_paused()) {
    if (on) t0 = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (on) profile_add(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
};

}  // namespace zaya

#define ZAYA_PROFILE_CAT2(a, b) a##b
#define ZAYA_PROFILE_CAT(a, b) ZAYA_PROFILE_CAT2(a, b)
#define ZAYA_PROFILE_SCOPE(name) ::zaya::ProfileScope ZAYA_PROFILE_CAT(zaya_prof_, __LINE__)(name)
