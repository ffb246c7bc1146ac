// A libFuzzer-compatible driver for g++ builds: replays files given as arguments, then runs seeded
// random mutations (bit flips, truncations, byte insertions, length-field smashing) of a seed input
// produced by the target's optional LLVMFuzzerSeed(). Any crash or sanitizer report fails the test.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional: a target may provide valid seed inputs to mutate.
extern "C" __attribute__((weak)) size_t LLVMFuzzerSeedCount();
extern "C" __attribute__((weak)) std::vector<uint8_t> LLVMFuzzerSeed(size_t i);

static std::vector<uint8_t> mutate(std::vector<uint8_t> in, std::mt19937_64& rng) {
  int n_mut = 1 + int(rng() % 4);
  for (int m = 0; m < n_mut; m++) {
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!in.empty()) in[rng() % in.size()] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // truncate
        if (!in.empty()) in.resize(rng() % in.size());
        break;
      case 2:  // insert random bytes
      {
        size_t pos = in.empty() ? 0 : rng() % (in.size() + 1);
        size_t cnt = 1 + rng() % 16;
        for (size_t k = 0; k < cnt; k++) in.insert(in.begin() + long(pos), uint8_t(rng()));
        break;
      }
      case 3:  // overwrite 8 bytes with an extreme little-endian integer
        if (in.size() >= 8) {
          uint64_t vals[] = {0, ~0ull, 1ull << 63, 0x7fffffffffffffffull, uint64_t(in.size()), rng()};
          uint64_t v = vals[rng() % 6];
          size_t pos = rng() % (in.size() - 7);
          std::memcpy(in.data() + pos, &v, 8);
        }
        break;
      case 4:  // replace a byte with a JSON-significant character
        if (!in.empty()) {
          const char chars[] = "{}[]\":,0-9e.\\ ";
          in[rng() % in.size()] = uint8_t(chars[rng() % (sizeof(chars) - 1)]);
        }
        break;
      case 5:  // duplicate a chunk
        if (in.size() > 2) {
          size_t a = rng() % in.size(), len = 1 + rng() % std::min<size_t>(64, in.size() - a);
          std::vector<uint8_t> chunk(in.begin() + long(a), in.begin() + long(a + len));
          in.insert(in.begin() + long(rng() % in.size()), chunk.begin(), chunk.end());
        }
        break;
    }
  }
  return in;
}

int main(int argc, char** argv) {
  long iterations = 10000;
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else files.push_back(argv[i]);
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::vector<std::vector<uint8_t>> seeds;
  if (LLVMFuzzerSeedCount) {
    for (size_t i = 0; i < LLVMFuzzerSeedCount(); i++) seeds.push_back(LLVMFuzzerSeed(i));
  }
  if (seeds.empty()) seeds.push_back({});
  std::mt19937_64 rng(seed);
  for (long it = 0; it < iterations; it++) {
    std::vector<uint8_t> input = mutate(seeds[it % seeds.size()], rng);
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("fuzz: %ld mutated inputs and %zu files ran without a crash\n", iterations, files.size());
  return 0;
}
