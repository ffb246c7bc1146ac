// safetensors I/O speed: header parsing of a checkpoint with many tensors, opening + reading every
// byte of a mapped file, and the streaming sharded writer (fill into the mapped output, fsync, rename).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint_files.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace fs = std::filesystem;
using namespace zaya;

namespace {

std::string bench_dir() {
  static std::string dir = [] {
    std::string d = (fs::temp_directory_path() / ("zaya_st_bench_" + std::to_string(::getpid()))).string();
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// A model-like list: `layers` layers of 12 tensors each (like a real MoE checkpoint's header).
std::vector<TensorSpec> model_specs(int layers, int64_t hidden) {
  std::vector<TensorSpec> specs = {{"model.embed_tokens.weight", DType::BF16, {4 * hidden, hidden}}};
  for (int l = 0; l < layers; l++) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"})
      specs.push_back({p + n, DType::BF16, {hidden, hidden}});
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate.bias",
                          "mlp.gate.balancing_biases", "self_attn.temp"})
      specs.push_back({p + n, DType::F32, {hidden}});
    specs.push_back({p + "mlp.gate.ids", DType::I64, {8}});
  }
  return specs;
}

void fill_constant(const TensorSpec& s, void* dst) {
  std::memset(dst, 0x3c, s.nbytes());
}

// Parsing + validating the header of a 1000-layer (12001-tensor) file; data is tiny (hidden 4).
void BM_ParseHeader(benchmark::State& state) {
  std::vector<TensorSpec> specs = model_specs(int(state.range(0)), 4);
  std::string dir = bench_dir() + "/header";
  write_safetensors_sharded(dir, specs, fill_constant, uint64_t(1) << 40);
  std::string path = dir + "/model.safetensors";
  for (auto _ : state) {
    SafetensorsFile f = SafetensorsFile::open(path);
    benchmark::DoNotOptimize(f.size());
  }
  state.counters["tensors"] = double(specs.size());
  state.counters["header_bytes"] = double(SafetensorsFile::open(path).data_offset());
}
BENCHMARK(BM_ParseHeader)->Arg(1000)->Unit(benchmark::kMillisecond);

// Streaming write of a ~256 MB checkpoint in 64 MB shards (includes fsync of every file).
void BM_WriteSharded(benchmark::State& state) {
  std::vector<TensorSpec> specs = model_specs(24, 1024);  // 24 * 6 * 2 MB + 8 MB embed = 296 MB
  uint64_t total = 0;
  for (const TensorSpec& s : specs) total += s.nbytes();
  std::string dir = bench_dir() + "/sharded";
  for (auto _ : state) {
    auto files = write_safetensors_sharded(dir, specs, fill_constant, uint64_t(64) << 20);
    benchmark::DoNotOptimize(files.size());
  }
  state.SetBytesProcessed(int64_t(state.iterations() * total));
}
BENCHMARK(BM_WriteSharded)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// Open a sharded checkpoint and read every tensor byte (page cache warm after the first pass).
void BM_OpenAndReadAll(benchmark::State& state) {
  std::vector<TensorSpec> specs = model_specs(24, 1024);
  uint64_t total = 0;
  for (const TensorSpec& s : specs) total += s.nbytes();
  std::string dir = bench_dir() + "/read";
  write_safetensors_sharded(dir, specs, fill_constant, uint64_t(64) << 20);
  for (auto _ : state) {
    CheckpointFiles c = CheckpointFiles::open(dir);
    uint64_t sum = 0;
    for (const std::string& n : c.names()) {
      Tensor t = c.tensor(n);
      const auto* p = static_cast<const uint64_t*>(t.data);
      for (size_t i = 0; i < t.nbytes() / 8; i++) sum += p[i];
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(int64_t(state.iterations() * total));
  fs::remove_all(bench_dir());
}
BENCHMARK(BM_OpenAndReadAll)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
