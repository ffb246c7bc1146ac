// What this machine's CPU is and which of the instruction sets zaya's kernels use it has: for
// `zaya --version` and beside benchmark figures (the same binary runs at other speeds on Zen 4 and Zen 5).
#pragma once

#include <string>

namespace zaya {

struct CpuInfo {
  std::string model;  // /proc/cpuinfo "model name" (e.g. "AMD EPYC 9B45"), "unknown" elsewhere
  int family = -1;    // "cpu family" (25 = Zen 3/4, 26 = Zen 5), -1 when unknown
  int cores = 0;      // online logical CPUs
  std::string
      features;  // the ISA extensions the kernels care about that the CPU has, e.g. "avx512f avx512bf16"
};

CpuInfo cpu_info();

// One line: "AMD EPYC 9B45 (family 26), 2 CPUs, avx2 fma avx512f ...".
std::string cpu_summary();

// Peak resident set size of this process in MB (/proc/self/status VmHWM); 0 when unknown.
double peak_rss_mb();

}  // namespace zaya
