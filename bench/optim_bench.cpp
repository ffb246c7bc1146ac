// Optimizer step speed: Newton–Schulz (Muon's cost: 15 fp32 GEMMs per matrix), a whole Muon update of an
// expert tensor, and the AdamW update (memory bound: 4 streams read, 3 written).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "train/adamw.h"
#include "train/muon.h"

using namespace zaya::train;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Args: rows, cols. FLOP count per iteration: X·Xᵀ (2m²k) + A·A (2m³) + B·X (2m²k), m = short side.
// Args: rows, cols, operand dtype (0 fp32, 1 bf16).
void BM_NewtonSchulz(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const int64_t m = std::min(rows, cols), k = std::max(rows, cols);
  std::vector<float> g = random_values(size_t(rows * cols), 1), x, scratch;
  MuonConfig cfg;
  cfg.ns_dtype = state.range(2) ? zaya::DType::BF16 : zaya::DType::F32;
  state.SetLabel(zaya::dtype_name(cfg.ns_dtype));
  for (auto _ : state) {
    x = g;
    newton_schulz(x.data(), rows, cols, cfg, scratch);
    benchmark::DoNotOptimize(x.data());
  }
  const double flops = double(cfg.ns_steps) * (4.0 * m * m * k + 2.0 * m * m * m);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_NewtonSchulz)
    ->ArgsProduct({{128}, {128}, {0, 1}})
    ->ArgsProduct({{512}, {128}, {0, 1}})
    ->ArgsProduct({{1024}, {1024}, {0, 1}})
    ->ArgsProduct({{2048}, {1024}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: experts, rows, cols, operand dtype (0 fp32, 1 bf16): one Muon step of an expert tensor [E, rows,
// cols].
void BM_MuonExperts(benchmark::State& state) {
  const int64_t E = state.range(0), rows = state.range(1), cols = state.range(2);
  const size_t n = size_t(E * rows * cols);
  std::vector<float> w = random_values(n, 2), g = random_values(n, 3), buf(n, 0.0f), scratch;
  MuonConfig cfg;
  cfg.ns_dtype = state.range(3) ? zaya::DType::BF16 : zaya::DType::F32;
  state.SetLabel(zaya::dtype_name(cfg.ns_dtype));
  const int64_t m = std::min(rows, cols), k = std::max(rows, cols);
  const double flops = double(E) * cfg.ns_steps * (4.0 * m * m * k + 2.0 * m * m * m);
  for (auto _ : state) muon_update(w.data(), g.data(), buf.data(), E, rows, cols, 1e-4f, 0.1f, cfg, scratch);
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MuonExperts)
    ->ArgsProduct({{8}, {128}, {128}, {0, 1}})
    ->ArgsProduct({{8}, {128}, {64}, {0, 1}})
    ->ArgsProduct({{16}, {512}, {256}, {0, 1}})
    ->ArgsProduct({{8}, {512}, {256}, {0, 1}})
    ->ArgsProduct({{8}, {256}, {256}, {0, 1}})
    ->ArgsProduct({{16}, {2048}, {1024}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: elements, clip factor (0/1). Bytes moved per element: read p, g, m, v (16) + write p, m, v (12).
void BM_AdamW(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> p = random_values(size_t(n), 4), g = random_values(size_t(n), 5),
                     m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  AdamWConfig cfg;
  int64_t step = 0;
  // Arg 1: the training step's form, with the clip factor applied as the gradient is read.
  const float scale = state.range(1) ? 0.5f : 1.0f;
  for (auto _ : state)
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.1f, cfg, ++step, scale);
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 28);
  state.SetLabel(state.range(1) ? "clip factor" : "plain");
}
BENCHMARK(BM_AdamW)
    ->ArgsProduct({{1 << 16, 1 << 22, 1 << 25}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
