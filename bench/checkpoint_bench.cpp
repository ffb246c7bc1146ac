// Training-checkpoint save and verified load (ckpt/checkpoint.h) on one rank: MB/s of write_rank_part +
// commit (data file written and fsynced, manifest, marker) and of Checkpoint::open (map + xxh3 of every
// tensor), for a checkpoint of 64 tensors totalling Arg MB in a temp directory.
//   ./bench/checkpoint_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"

namespace zaya {
namespace {

namespace fs = std::filesystem;

std::vector<ckpt::TensorEntry> make_tensors(int64_t total_mb) {
  const int64_t per = total_mb * (1 << 20) / 4 / 64;
  std::vector<ckpt::TensorEntry> out;
  for (int i = 0; i < 64; i++) {
    Tensor t = Tensor::empty(DType::F32, {per});
    for (int64_t j = 0; j < per; j++) t.f32()[j] = float(j % 977) * 0.25f + float(i);
    out.push_back({"t" + std::to_string(i), t, {}, 0});
  }
  return out;
}

std::string bench_root() {
  return (fs::temp_directory_path() / ("zaya_ckpt_bench_" + std::to_string(getpid()))).string();
}

void BM_Save(benchmark::State& state) {
  const auto tensors = make_tensors(state.range(0));
  const std::string root = bench_root();
  int64_t step = 0;
  for (auto _ : state) {
    const std::string dir = ckpt::step_dir(root, ++step);
    ckpt::write_rank_part(dir, 0, tensors);
    ckpt::commit(dir, step, 1, nlohmann::json::object());
    ckpt::apply_retention(root, 1, 0);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * (1 << 20));
  fs::remove_all(root);
}
BENCHMARK(BM_Save)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_OpenVerified(benchmark::State& state) {
  const std::string root = bench_root();
  const std::string dir = ckpt::step_dir(root, 1);
  ckpt::write_rank_part(dir, 0, make_tensors(state.range(0)));
  ckpt::commit(dir, 1, 1, nlohmann::json::object());
  for (auto _ : state) {
    ckpt::Checkpoint ck = ckpt::Checkpoint::open(dir);
    benchmark::DoNotOptimize(ck.step());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * (1 << 20));
  fs::remove_all(root);
}
BENCHMARK(BM_OpenVerified)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace zaya
