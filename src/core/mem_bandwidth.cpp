#include "core/mem_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/tensor.h"
#include "core/threads.h"

namespace zaya {

namespace {

// Sum of n floats, read once front to back (the value only keeps the loads alive).
float read_all(const float* p, size_t n) {
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < n; i++) s += p[i];
  return s;
#elif defined(__AVX2__)
  // Eight independent chains of 8 lanes: one serial float sum would hold the probe to ~4 bytes a cycle, below
  // what a decode kernel reads (measured 8 GB/s against decode's 13-20 on a 2-core Zen 3).
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 8; j++) acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(p + i + 8 * j));
  for (int j = 1; j < 8; j++) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < n; i++) s += p[i];
  return s;
#else
  float s = 0;
  for (size_t i = 0; i < n; i++) s += p[i];
  return s;
#endif
}

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(size_t bytes)
    : bytes_(bytes / sizeof(float) / 1024 * 1024 * sizeof(float)),  // whole 4 KB chunks: parts aligned
      buf_(huge_alloc_shared(bytes_)) {}  // zero-filled: every page touched, none the shared zero page

double ReadBandwidthProbe::measure(int passes) const {
  const size_t n = bytes_ / sizeof(float);
  const float* p = static_cast<const float*>(buf_.get());
  const int threads = num_threads();
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r <= passes; r++) {  // r == 0 warms up
    float total = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      // Static contiguous parts: each thread streams its own range, as the decode kernels' tiles do.
#pragma omp for schedule(static)
      for (int t = 0; t < threads; t++) {
        const size_t chunk = n / size_t(threads) / 16 * 16;
        const size_t begin = size_t(t) * chunk, end = t == threads - 1 ? n : begin + chunk;
        total += read_all(p + begin, end - begin);
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    if (r > 0) best = std::max(best, double(bytes_) / s / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace zaya
