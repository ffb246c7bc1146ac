// Fuzz target for quantized checkpoints (io/quant_checkpoint.h, the quantized branch of load_weights): the
// input's first byte b picks one of three micro ZAYA1 checkpoints written by `zaya quantize` (b % 3: Q8_0
// everywhere, MXFP4 experts, FP8 experts; fuzz/fixtures/quant/, fuzz/make_corpus.sh), whose config.json
// (with its quantization_config) is copied beside the rest of the input, which becomes model.safetensors,
// and how it loads: bf16 compute if (b / 3) & 1 (the serving path), matrices copied out of the mapping
// (--no-mmap) if (b / 6) & 1.
// ZayaModel::load either throws zaya::Error or returns a model; a loaded model then runs a 4-token prefill
// and a 1-token decode step, so the decode kernels read the mutated blocks and scales (any output value is
// acceptable; a crash, an escaping exception of another type or an out-of-bounds read is not).

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_temp_dir.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/zaya.h"

namespace {

namespace fs = std::filesystem;

const char* const kCheckpoints[] = {"q8_0-all", "mxfp4-experts", "fp8-experts"};
constexpr size_t kCount = sizeof(kCheckpoints) / sizeof(kCheckpoints[0]);

// One directory per checkpoint kind holding its config.json (copied once per process); the input's
// safetensors bytes are written beside it for each run.
const std::string& checkpoint_dir(size_t kind) {
  static const std::vector<std::string> dirs = [] {
    const std::string root = zaya::fuzz::temp_dir("zaya_quant_fuzz");
    std::vector<std::string> out;
    for (const char* name : kCheckpoints) {
      const std::string d = root + "/" + name;
      fs::create_directories(d);
      fs::copy_file(std::string(ZAYA_SOURCE_DIR) + "/fuzz/fixtures/quant/" + name + ".config.json",
                    d + "/config.json");
      out.push_back(d);
    }
    return out;
  }();
  return dirs[kind];
}

// The corpus file of checkpoint `kind` (fuzz/corpus/quant_checkpoint_fuzz/), which loads it mapped with fp32
// compute.
std::vector<uint8_t> corpus_file(size_t kind) {
  std::ifstream f(
      std::string(ZAYA_SOURCE_DIR) + "/fuzz/corpus/quant_checkpoint_fuzz/" + kCheckpoints[kind] + ".bin",
      std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Checkpoint `kind`'s corpus file with its scales stored as BF16 (the FP8 scales of Zyphra's files are; Q8_0
// scales in BF16 are converted at load): the same selector byte, then the rewritten file.
std::vector<uint8_t> with_bf16_scales(size_t kind) {
  const std::vector<uint8_t> file = corpus_file(kind);
  if (file.empty()) return file;
  const zaya::SafetensorsFile f = zaya::SafetensorsFile::parse(file.data() + 1, file.size() - 1, "seed");
  std::vector<std::pair<std::string, zaya::Tensor>> tensors;
  for (const std::string& name : f.names()) {
    zaya::Tensor t = f.tensor(name);
    const std::string tail = ".weight_scale";
    const bool scale =
        name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    tensors.emplace_back(name, scale ? t.to(zaya::DType::BF16) : t);
  }
  const std::string path = checkpoint_dir(kind) + "/seed.safetensors";
  zaya::write_safetensors(path, tensors);
  std::vector<uint8_t> out{file[0]};
  {
    std::ifstream in(path, std::ios::binary);
    out.insert(out.end(), std::istreambuf_iterator<char>(in), {});
  }
  fs::remove(path);  // the directory holds the input's model.safetensors only
  return out;
}

}  // namespace

// Built-in seeds: the corpus files again with bf16 compute and the matrices copied (selector + 9), and the
// Q8_0 and FP8 files with BF16 scales.
extern "C" size_t LLVMFuzzerSeedCount() {
  return kCount + 2;
}
extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  if (i >= kCount) return with_bf16_scales(i == kCount ? 0 : 2);  // q8_0-all, fp8-experts
  std::vector<uint8_t> bytes = corpus_file(i);
  if (!bytes.empty()) bytes[0] = uint8_t(i + 3 * kCount);
  return bytes;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& dir = checkpoint_dir(data[0] % kCount);
  zaya::LoadOptions lo;
  lo.compute = (data[0] / kCount) & 1 ? zaya::DType::BF16 : zaya::DType::F32;
  lo.in_memory = (data[0] / (2 * kCount)) & 1;
  {
    std::ofstream f(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));
  }
  try {
    const zaya::ZayaModel model = zaya::ZayaModel::load(dir, lo);
    zaya::ZayaCache cache(model.cfg, 1);
    zaya::ForwardOptions opt;
    zaya::ForwardResult res;
    zaya::ForwardScratch scratch;
    const int32_t prompt[4] = {2, 5, 7, 11};
    zaya::zaya_forward(model, cache, prompt, nullptr, 1, 4, opt, res, scratch);
    const int32_t next = 13;
    zaya::zaya_forward(model, cache, &next, nullptr, 1, 1, opt, res, scratch);
  } catch (const zaya::Error&) {
  }
  return 0;
}
