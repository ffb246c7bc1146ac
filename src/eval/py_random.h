// Python's `random.Random` (CPython Modules/_randommodule.c + Lib/random.py), reproduced bit for bit for
// the few calls lm-evaluation-harness makes with it: seeding with an int, random(), getrandbits(k <= 32),
// _randbelow, sample() and choices(). lm-eval draws few-shot examples with `Random(1234).sample(...)`
// (lm_eval/api/samplers.py ContextSampler) and bootstraps perplexity stderrs with
// `Random(i).choices(xs, k=len(xs))` (lm_eval/api/metrics.py); matching the generator makes our few-shot
// prompts and stderrs the same as lm-eval's, not merely equally random.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zaya::eval {

class PyRandom {
 public:
  // Random(seed) for a non-negative int seed below 2^64 (CPython: init_by_array over the 32-bit words of
  // abs(seed), least significant first).
  explicit PyRandom(uint64_t seed);

  // random(): a double in [0, 1) with 53 random bits (two 32-bit outputs).
  double random();
  // getrandbits(k) for 0 <= k <= 32: the top k bits of one 32-bit output (k == 0 consumes nothing).
  uint32_t getrandbits(int k);
  // _randbelow(n) for n >= 1: rejection sampling on getrandbits(n.bit_length()).
  uint64_t randbelow(uint64_t n);
  // sample(range(n), k): k distinct indices in [0, n) in Python's order (pool algorithm for small n,
  // set algorithm for large). Throws zaya::Error when k > n (Python's ValueError).
  std::vector<size_t> sample_indices(size_t n, size_t k);
  // choices(range(n), k=k): k indices drawn with replacement as floor(random() * n).
  std::vector<size_t> choices_indices(size_t n, size_t k);

 private:
  uint32_t next_u32();
  std::array<uint32_t, 624> state_{};
  int index_ = 624;
};

}  // namespace zaya::eval
