// A 64-bit mixing function (splitmix64's finalizer) and a tiny seeded generator built on it: the
// deterministic randomness of the data pipeline (validation split, epoch shuffles). Fixed arithmetic, so
// the same seed gives the same split and the same order on every machine and compiler.
#pragma once

#include <cstdint>

namespace zaya::data {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// splitmix64: next() returns a new 64-bit value each call.
struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

}  // namespace zaya::data
