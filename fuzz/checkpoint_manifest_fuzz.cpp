// Fuzz target for training-checkpoint manifests (ckpt/checkpoint.h): the input bytes become manifest.json of
// a committed checkpoint directory next to a real data file; Checkpoint::open either throws zaya::Error or
// returns tensors that lie inside the data file and whose checksums matched.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/error.h"

namespace {

namespace fs = std::filesystem;

// A committed two-tensor checkpoint (built once per process); returns its directory.
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string root =
        (fs::temp_directory_path() / ("zaya_ckpt_fuzz_" + std::to_string(getpid()))).string();
    fs::remove_all(root);
    static const std::string to_remove = root;
    std::atexit([] { fs::remove_all(to_remove); });
    const std::string d = zaya::ckpt::step_dir(root, 3);
    zaya::Tensor a = zaya::Tensor::empty(zaya::DType::F32, {2, 3});
    zaya::Tensor b = zaya::Tensor::empty(zaya::DType::I64, {1});
    for (int i = 0; i < 6; i++) a.f32()[i] = float(i);
    zaya::ckpt::write_rank_part(d, 0, {{"a", a, {}, 0}, {"optim.step", b, {}, 0}});
    zaya::ckpt::commit(d, 3, 1, {{"loader", {{"seed", 1}, {"epoch", 0}, {"position", 64}}}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpoint_dir();
  {
    std::ofstream f(dir + "/manifest.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  {
    // A marker that matches the input: the fuzzer exercises the manifest parser, not only its checksum.
    std::ofstream f(dir + "/COMPLETE", std::ios::binary | std::ios::trunc);
    f << "step 3\nmanifest xxh3 " << zaya::ckpt::xxh3_hex(data, size) << "\n";
  }
  try {
    zaya::ckpt::Checkpoint ck = zaya::ckpt::Checkpoint::open(dir);
    const size_t file_size = fs::file_size(dir + "/rank_00000.bin");
    for (int owner = 0; owner < ck.world(); owner++)
      for (const auto& [name, t] : ck.tensors_of(owner))
        ZAYA_ASSERT(t.nbytes() <= file_size, "a verified tensor lies inside its data file");
    std::vector<float> a(6);
    if (ck.has("a")) ck.assemble("a", zaya::DType::F32, {2, 3}, a.data());
  } catch (const zaya::Error&) {
  }
  return 0;
}

extern "C" size_t LLVMFuzzerSeedCount() {
  return 1;
}

extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t) {
  // The manifest of the committed checkpoint, read before any input overwrote it.
  static const std::vector<uint8_t> seed = [] {
    std::ifstream f(checkpoint_dir() + "/manifest.json", std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }();
  return seed;
}
