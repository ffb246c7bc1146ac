// Fuzz target for training-checkpoint manifests (ckpt/checkpoint.h): the input bytes become manifest.json of
// a committed checkpoint directory next to a real data file; Checkpoint::open either throws zaya::Error or
// returns tensors that lie inside the data file and whose checksums matched.
// Two directories take each input: a synthetic two-tensor checkpoint (built here), and the data file of a
// real 2-step `zaya train` run of a micro model (fuzz/fixtures/checkpoint/rank_00000.bin, whose manifest is
// in the corpus: fuzz/make_corpus.sh), so that mutations of a real manifest get past the file checks.

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "fuzz_temp_dir.h"

namespace {

namespace fs = std::filesystem;

// A committed two-tensor checkpoint (built once per process); returns its directory.
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string root = zaya::fuzz::temp_dir("zaya_ckpt_fuzz");
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

// The real checkpoint's step directory: a copy of the committed data file (built once per process).
const std::string& real_checkpoint_dir() {
  static const std::string dir = [] {
    const std::string root = zaya::fuzz::temp_dir("zaya_ckpt_fuzz_real");
    const std::string d = zaya::ckpt::step_dir(root, 2);
    fs::create_directories(d);
    fs::copy_file(std::string(ZAYA_SOURCE_DIR) + "/fuzz/fixtures/checkpoint/rank_00000.bin",
                  d + "/rank_00000.bin");
    return d;
  }();
  return dir;
}

void open_with_manifest(const std::string& dir, int64_t step, const uint8_t* data, size_t size) {
  {
    std::ofstream f(dir + "/manifest.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  {
    // A marker that matches the input: the fuzzer exercises the manifest parser, not only its checksum.
    std::ofstream f(dir + "/COMPLETE", std::ios::binary | std::ios::trunc);
    f << "step " << step << "\nmanifest xxh3 " << zaya::ckpt::xxh3_hex(data, size) << "\n";
  }
  try {
    zaya::ckpt::Checkpoint ck = zaya::ckpt::Checkpoint::open(dir);
    const size_t file_size = fs::file_size(dir + "/rank_00000.bin");
    for (int owner = 0; owner < ck.world(); owner++)
      for (const auto& [name, t] : ck.tensors_of(owner))
        ZAYA_ASSERT(t.nbytes() <= file_size, "a verified tensor lies inside its data file");
    std::vector<float> a(6);
    if (ck.has("a")) ck.assemble("a", zaya::DType::F32, {2, 3}, a.data());
    // The micro model's embedding [300, 16] F32, when a manifest names it (the real one does).
    const std::string emb = "model.embed_tokens.weight";
    if (ck.has(emb)) {
      std::vector<float> w(300 * 16);
      ck.assemble(emb, zaya::DType::F32, {300, 16}, w.data());
    }
  } catch (const zaya::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  open_with_manifest(checkpoint_dir(), 3, data, size);
  open_with_manifest(real_checkpoint_dir(), 2, data, size);
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
