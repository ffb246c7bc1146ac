// The machine's memory read bandwidth, measured: what decode (which streams every weight a token touches)
// can reach at best. `zaya bench decode` reports the fraction of it that a decode step achieves.
#pragma once

#include <cstddef>
#include <memory>

namespace zaya {

// A buffer kept for measuring the read bandwidth again and again in one run: on a shared machine the
// bandwidth moves by tens of percent within minutes, so a decode repetition is compared with a measurement
// taken beside it, not with one taken at the start. The buffer lives on huge pages (core/tensor.h:
// huge_alloc_shared), as the weights that decode streams do, and stays resident while the probe lives.
class ReadBandwidthProbe {
 public:
  // `bytes` should be much larger than the last-level cache (default 1 GiB; caches seen here reach 260 MiB).
  explicit ReadBandwidthProbe(size_t bytes = size_t(1) << 30);
  // GB/s (1e9 bytes) of a threaded streaming read (all OpenMP threads, each its own contiguous part, AVX-512
  // loads summed so nothing is optimised away) of the whole buffer: the best of `passes` passes after one
  // warm-up pass.
  double measure(int passes = 3) const;
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::shared_ptr<void> buf_;
};

}  // namespace zaya
