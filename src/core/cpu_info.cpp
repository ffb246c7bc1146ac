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
  ZAYA_FEATURE("amx-bf16")
#undef ZAYA_FEATURE
  return c;
}

std::string cpu_summary() {
  const CpuInfo c = cpu_info();
  return c.model + (c.family >= 0 ? " (family " + std::to_string(c.family) + ")" : "") + ", " +
         std::to_string(c.cores) + " CPUs, " + (c.features.empty() ? "no AVX2" : c.features);
}

namespace {
// The value of environment variable `env` (a number: nonzero = true) when set, else whether this is an AMD
// CPU of family `min_family` or later that has the ISA extension (`has_isa`).
bool env_or_amd_family(const char* env, bool has_isa, int min_family) {
  if (const char* v = std::getenv(env); v && *v) return std::atoi(v) != 0;
  if (!has_isa) return false;
  const CpuInfo c = cpu_info();
  return c.vendor == "AuthenticAMD" && c.family >= min_family;
}
}  // namespace

bool cpu_fast_bf16_dot() {
  static const bool fast = [] {
    __builtin_cpu_init();
    return env_or_amd_family("ZAYA_BF16_DOT", __builtin_cpu_supports("avx512bf16"), 25);
  }();
  return fast;
}

bool cpu_full_width_avx512() {
  static const bool full = [] {
    __builtin_cpu_init();
    return env_or_amd_family("ZAYA_FULL_WIDTH_AVX512", __builtin_cpu_supports("avx512f"), 26);
  }();
  return full;
}

bool cpu_fast_bf16_matmul() {
  static const bool fast = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("amx-bf16")) return true;
    if (!__builtin_cpu_supports("avx512bf16")) return false;
    const CpuInfo c = cpu_info();
    return c.vendor == "AuthenticAMD" && c.family >= 25;
  }();
  return fast;
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
