// What this machine's CPU is and which of the instruction sets zaya's kernels use it has: for
// `zaya --version` and beside benchmark figures (the same binary runs at other speeds on Zen 4 and Zen 5).
#pragma once

#include <string>

namespace zaya {

struct CpuInfo {
  std::string model;   // /proc/cpuinfo "model name" (e.g. "AMD EPYC 9B45"), "unknown" elsewhere
  std::string vendor;  // /proc/cpuinfo "vendor_id" ("AuthenticAMD", "GenuineIntel"), "" when unknown
  int family = -1;     // "cpu family" (25 = Zen 3/4, 26 = Zen 5), -1 when unknown
  int cores = 0;       // online logical CPUs
  std::string
      features;  // the ISA extensions the kernels care about that the CPU has, e.g. "avx512f avx512bf16"
};

CpuInfo cpu_info();

// One line: "AMD EPYC 9B45 (family 26), 2 CPUs, avx2 fma avx512f ...".
std::string cpu_summary();

// Whether vdpbf16ps multiplies bf16 pairs at least as fast per product as fp32 fmas do, so that decode
// products with many rows (quant_gemm.h) should round their activations to bf16 and use it. Measured: AMD
// Zen 4 (family 25) runs it at the fma's instruction rate, so twice the products (32-40 vs 16-20 GMAC/s a
// core, 2-core EPYC, 12 independent chains); an Intel Xeon seen here ran it at half its fma rate (42 vs 85
// GMAC/s). So: AMD with avx512bf16 and family >= 25. ZAYA_BF16_DOT=1 / 0 overrides (benchmarks compare
// both); read once.
bool cpu_fast_bf16_dot();

// Whether oneDNN's bf16 matmul outruns its fp32 one on this CPU: AMX-BF16 tiles, or vdpbf16ps at twice the
// fp32 fma's products (AMD Zen 4 / 5, family >= 25). Not on an Intel Xeon with avx512bf16 whose AMX is
// absent or hidden (family 6 model 207 under a hypervisor, 2026-12-04): vdpbf16ps there runs at half the
// fma's instruction rate, the same products per cycle, and oneDNN 2.6's bf16 matmul reached 150-172 GFLOP/s
// on 2 cores against 250-340 for its fp32 one on the same products (bench/gemm_bench, mid shapes). gemm()
// widens bf16 products with many rows to fp32 on such CPUs (kernels/gemm.h). Read once.
bool cpu_fast_bf16_matmul();

// Whether the CPU executes 512-bit vector instructions on full-width units (AMD Zen 5, family >= 26; Zen 4
// splits them into two 256-bit halves). gemm() picks its oneDNN backend for bf16 products by it: on Zen 5
// oneDNN's gemm:jit kernel (runtime-M primitives) outruns brgemm's fixed-shape kernels at every model product
// of 128+ rows and 128+ columns, on Zen 4 not (kernels/gemm.cpp). ZAYA_FULL_WIDTH_AVX512=1 / 0 overrides;
// read once.
bool cpu_full_width_avx512();

// Peak resident set size of this process in MB (/proc/self/status VmHWM); 0 when unknown.
double peak_rss_mb();

}  // namespace zaya
