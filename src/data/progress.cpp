#include "data/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace zaya::data {

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_bytes_(total_bytes), enabled_(enabled), tty_(isatty(2)) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void ProgressBar::update(uint64_t docs, uint64_t bytes) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  if (since < (tty_ ? 0.2 : 10.0)) return;
  last_ = now;
  print(docs, bytes, false);
}

void ProgressBar::finish(uint64_t docs, uint64_t bytes) {
  if (!enabled_) return;
  print(docs, bytes, true);
}

void ProgressBar::print(uint64_t docs, uint64_t bytes, bool final) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double mb = bytes / 1e6, total_mb = total_bytes_ / 1e6;
  double rate = secs > 0 ? mb / secs : 0;
  double frac = total_bytes_ ? std::min(1.0, double(bytes) / double(total_bytes_)) : 1.0;
  constexpr int kWidth = 24;
  char bar[kWidth + 1];
  int filled = int(frac * kWidth);
  for (int i = 0; i < kWidth; i++) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = 0;
  double eta = rate > 0 ? (total_mb - mb) / rate : 0;
  std::fprintf(stderr, "%s%s [%s] %3.0f%% %llu docs %.1f/%.1f MB %.2f MB/s %s %.0fs%s", tty_ ? "\r" : "",
               label_.c_str(), bar, 100 * frac, (unsigned long long)docs, mb, total_mb, rate,
               final ? "took" : "ETA", final ? secs : eta, (final || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace zaya::data
