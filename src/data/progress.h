// A one-line progress bar on stderr for long data jobs: documents, MB done of the total, MB/s and ETA.
// On a terminal the line is redrawn in place (at most 5 times a second); otherwise (a log file) a full
// line is printed at most every 10 seconds, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zaya::data {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total_bytes, bool enabled);
  // Reports the totals so far; cheap to call often (prints only when the interval has passed).
  void update(uint64_t docs, uint64_t bytes);
  // Prints the final state and a newline.
  void finish(uint64_t docs, uint64_t bytes);

 private:
  void print(uint64_t docs, uint64_t bytes, bool final);
  std::string label_;
  uint64_t total_bytes_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace zaya::data
