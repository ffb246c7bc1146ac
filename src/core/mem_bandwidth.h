// The machine's memory read bandwidth, measured: what decode (which streams every weight a token touches)
// can reach at best. `zaya bench decode` reports the fraction of it that a decode step achieves.
#pragma once

#include <cstddef>

namespace zaya {

// GB/s (1e9 bytes) of a threaded streaming read (all OpenMP threads, AVX-512 loads summed so nothing is
// optimised away) of a `bytes`-long buffer, the best of `repeats` passes after one warm-up pass. The
// buffer should be much larger than the last-level cache (default 1 GiB).
double measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int repeats = 5);

}  // namespace zaya
