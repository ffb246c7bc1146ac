#include "core/cpu_info.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace zaya {

CpuInfo cpu_info() {
  CpuInfo c;
  c.model = "unknown";
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && c.model == "unknown") c.model = value;
    if (key == "cpu family" && c.family < 0) c.family = std::atoi(value.c_str());
    if (key == "vendor_id" && c.vendor.empty()) c.vendor = value;
  }
  c.cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  __builtin_cpu_init();
  // Each name is a GCC __builtin_cpu_supports feature.
#define ZAYA_FEATURE(name) \
  if (__builtin_cpu_supports(name)) c.features += std::string(c.features.empty() ? "" : " ") + name;
  ZAYA_FEATURE("avx2")
  ZAYA_FEATURE("fma")
  ZAYA_FEATURE("avx512f")
  ZAYA_FEATURE("avx512bw")
  ZAYA_FEATURE("avx512vl")
  ZAYA_FEATURE("avx512vnni")
  ZAYA_FEATURE("avx512bf16")
#undef ZAYA_FEATURE
  return c;
}

std::string cpu_summary() {
  const CpuInfo c = cpu_info();
  return c.model + (c.family >= 0 ? " (family " + std::to_string(c.family) + ")" : "") + ", " +
         std::to_string(c.cores) + " CPUs, " + (c.features.empty() ? "no AVX2" : c.features);
}

bool cpu_fast_bf16_dot() {
  static const bool fast = [] {
    if (const char* env = std::getenv("ZAYA_BF16_DOT"); env && *env) return std::atoi(env) != 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return false;
    const CpuInfo c = cpu_info();
    return c.vendor == "AuthenticAMD" && c.family >= 25;
  }();
  return fast;
}

bool cpu_full_width_avx512() {
  static const bool full = [] {
    if (const char* env = std::getenv("ZAYA_FULL_WIDTH_AVX512"); env && *env) return std::atoi(env) != 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return false;
    const CpuInfo c = cpu_info();
    return c.vendor == "AuthenticAMD" && c.family >= 26;
  }();
  return full;
}

double peak_rss_mb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024.0;
}

}  // namespace zaya
