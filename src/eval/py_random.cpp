#include "eval/py_random.h"

#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace zaya::eval {

namespace {

constexpr int kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpperMask = 0x80000000u, kLowerMask = 0x7fffffffu;

void init_genrand(std::array<uint32_t, kN>& mt, uint32_t s) {
  mt[0] = s;
  for (int i = 1; i < kN; i++) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + uint32_t(i);
}

// MT19937 init_by_array, as CPython's random_seed() calls it.
void init_by_array(std::array<uint32_t, kN>& mt, const std::vector<uint32_t>& key) {
  init_genrand(mt, 19650218u);
  int i = 1;
  size_t j = 0;
  const size_t key_length = key.size();
  for (size_t k = (kN > key_length ? kN : key_length); k; k--) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
    i++;
    j++;
    if (i >= kN) {
      mt[0] = mt[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (int k = kN - 1; k; k--) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
    i++;
    if (i >= kN) {
      mt[0] = mt[kN - 1];
      i = 1;
    }
  }
  mt[0] = 0x80000000u;
}

int bit_length(uint64_t n) {
  int bits = 0;
  while (n) {
    bits++;
    n >>= 1;
  }
  return bits;
}

}  // namespace

PyRandom::PyRandom(uint64_t seed) {
  std::vector<uint32_t> key;
  while (seed) {
    key.push_back(uint32_t(seed & 0xffffffffu));
    seed >>= 32;
  }
  if (key.empty()) key.push_back(0);
  init_by_array(state_, key);
  index_ = kN;
}

uint32_t PyRandom::next_u32() {
  if (index_ >= kN) {
    for (int k = 0; k < kN; k++) {
      const uint32_t y = (state_[k] & kUpperMask) | (state_[(k + 1) % kN] & kLowerMask);
      state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    index_ = 0;
  }
  uint32_t y = state_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

double PyRandom::random() {
  const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return (double(a) * 67108864.0 + double(b)) * (1.0 / 9007199254740992.0);
}

uint32_t PyRandom::getrandbits(int k) {
  ZAYA_ASSERT(k >= 0 && k <= 32, "getrandbits is implemented for k <= 32 only");
  if (k == 0) return 0;
  return next_u32() >> (32 - k);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  ZAYA_ASSERT(n >= 1 && n <= 0xffffffffull, "randbelow needs 1 <= n < 2^32");
  const int k = bit_length(n);
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<size_t> PyRandom::sample_indices(size_t n, size_t k) {
  ZAYA_CHECK(k <= n, "cannot draw ", k, " distinct samples from ", n, " (Sample larger than population)");
  std::vector<size_t> result(k);
  size_t setsize = 21;  // Lib/random.py: size of a small set minus size of an empty list
  if (k > 5) setsize += size_t(std::pow(4.0, std::ceil(std::log(double(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; i++) pool[i] = i;
    for (size_t i = 0; i < k; i++) {
      const size_t j = size_t(randbelow(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<size_t> selected;
    for (size_t i = 0; i < k; i++) {
      size_t j = size_t(randbelow(n));
      while (selected.count(j)) j = size_t(randbelow(n));
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

std::vector<size_t> PyRandom::choices_indices(size_t n, size_t k) {
  std::vector<size_t> result(k);
  const double dn = double(n);
  for (size_t i = 0; i < k; i++) result[i] = size_t(std::floor(random() * dn));
  return result;
}

}  // namespace zaya::eval
