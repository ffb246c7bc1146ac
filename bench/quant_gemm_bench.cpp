// Weight-streaming throughput of the decode kernels (kernels/quant_gemm.h) and of the bf16 path, on
// ZAYA1-8B-shaped expert matrices (gate_up: [4096, 2048], 16 MB in bf16), copies totalling 1.5 GiB used in
// turn so that the weights come from memory, not from the last-level cache: GB/s of weights read (elements
// plus scales) per call, at the row counts of decode (1, 4, 16) and the prefill switch-over (32 rows, where
// the dequantize-to-bf16 GEMM takes over). The `bf16` / `fp8` rows are what decode picks on this CPU for
// weights without a pack; the `_f32stream` / `_dot` rows pin the fp32 streaming or the bf16 dot kernel;
// `bf16_packed` / `fp8_packed` are the float packed kernels and `bf16_packed_dot` the bf16 dot kernel over
// the bf16 pack (decode's pick for packed bf16 where it would take the bf16 dot kernel: Zen 5) (the packs a
// loaded model attaches to its dense bf16 matrices where bf16_decode_pack_wanted(false), to its FP8 ones
// where fp8_decode_pack_wanted()). Compare with `zaya bench decode`'s measured read bandwidth.
//
//   ./bench/quant_gemm_bench --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/mem_bandwidth.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/quant_gemm.h"

namespace zaya {
namespace {

constexpr int64_t kN = 4096, kK = 2048;
// The copies together: well beyond any last-level cache seen here (up to 260 MiB), so weights come from
// memory.
constexpr double kSetBytes = 1.5 * (1 << 30);

// Random N(0, 0.02) weights [N, K] in `fmt` (F32, BF16 or a quantized format), the same values per seed.
Tensor weights(DType fmt, int64_t N = kN, int64_t K = kK, uint32_t seed = 1) {
  Tensor f = Tensor::empty(DType::F32, {N, K});
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (int64_t i = 0; i < f.numel(); i++) f.f32()[i] = d(rng);
  if (fmt == DType::F32) return f;
  if (fmt == DType::BF16) return f.to(DType::BF16);
  return quantize(f, fmt);
}

// Activations as the model holds them: a 64-byte aligned tensor (a std::vector's data is 16-byte aligned,
// and 64-byte loads straddling two cache lines ran the fp32 streaming kernel ~1.5x slower at 16 rows on an
// Intel Xeon, bf16 weights: 7.2 vs 10.6 GB/s).
Tensor activations(int64_t M, int64_t K) {
  Tensor t = Tensor::empty(DType::F32, {M, K});
  std::fill(t.f32(), t.f32() + t.numel(), 0.5f);
  return t;
}

// Bytes a product reads from W: elements plus scales.
double weight_bytes(const Tensor& W) {
  return double(W.nbytes()) + (W.scales ? double(W.scales->nbytes()) : 0.0);
}

// via_gemm: the BF16 weights through gemm() (oneDNN), as before the streaming kernel took decode.
// packed: Q8_0 / MXFP4 packed for the VNNI kernel (int8 activations), BF16 / FP8 for the float packed ones.
// path: Auto is what decode picks on this CPU (bf16 compute); StreamF32 / Bf16Dot pin one kernel.
void BM_Weights(benchmark::State& state, DType fmt, bool via_gemm = false, bool packed = false,
                QuantPath path = QuantPath::Auto) {
  const int64_t M = state.range(0);
  if ((path == QuantPath::StreamAvx2 || path == QuantPath::Int8Avx2) && !quant_avx2_stream_available()) {
    state.SkipWithError("this build has no AVX2 kernels");
    return;
  }
  if ((path == QuantPath::Bf16Dot || path == QuantPath::PackedBf16Dot) && !quant_bf16_dot_available()) {
    state.SkipWithError("this build has no AVX512-BF16 dot kernel");
    return;
  }
  static std::vector<Tensor> w[8];
  const int slot = fmt == DType::BF16    ? (packed ? 6 : 0)
                   : fmt == DType::Q8_0  ? (packed ? 4 : 1)
                   : fmt == DType::MXFP4 ? (packed ? 5 : 2)
                                         : (packed ? 7 : 3);
  if (w[slot].empty()) {
    w[slot].push_back(weights(fmt));
    if (packed) pack_for_decode(w[slot].back());
    const Tensor& w0 = w[slot][0];
    const double one = weight_bytes(w0);                 // same values in every copy: bytes differ in place
    const char* env = std::getenv("ZAYA_BENCH_SET_MB");  // smaller: time the kernel on cached weights
    const double set = env ? std::atof(env) * double(1 << 20) : kSetBytes;
    while (double(w[slot].size()) * one < set) {
      w[slot].push_back(weights(fmt));
      if (packed) pack_for_decode(w[slot].back());
    }
  }
  const size_t kCopies = w[slot].size();
  const Tensor& W = w[slot][0];
  if ((path == QuantPath::PackedF32 || path == QuantPath::PackedBf16Dot) && !has_decode_pack(W)) {
    state.SkipWithError("no decode pack on this CPU (no AVX512-VNNI)");
    return;
  }
  Tensor in = activations(M, kK), out = activations(M, kN);
  int next = 0;
  for (auto _ : state) {
    const Tensor& Wi = w[slot][size_t(next++) % kCopies];
    if (via_gemm) {
      linear_forward(out.f32(), in.f32(), Wi, nullptr, M);
    } else {
      quant_linear_forward_with(path, out.f32(), kN, in.f32(), M, Wi);
    }
    benchmark::DoNotOptimize(out.f32());
  }
  state.counters["GB/s"] = benchmark::Counter(weight_bytes(W), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_Weights, bf16_gemm, DType::BF16, true)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, bf16, DType::BF16)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, bf16_packed, DType::BF16, false, true, QuantPath::PackedF32)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, bf16_packed_dot, DType::BF16, false, true, QuantPath::PackedBf16Dot)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, fp8_packed, DType::F8_E4M3, false, true, QuantPath::PackedF32)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, q8_0, DType::Q8_0)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, mxfp4, DType::MXFP4)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, q8_0_vnni, DType::Q8_0, false, true)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, mxfp4_vnni, DType::MXFP4, false, true)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, fp8, DType::F8_E4M3)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->UseRealTime();
// Prefill's path over a pack (Auto above kQuantStreamMaxRows rows: bf16 tiles unpacked from the pack, then
// the GEMM), beside fp8/32 (the same from the checkpoint's own layout).
BENCHMARK_CAPTURE(BM_Weights, fp8_packed_tiles, DType::F8_E4M3, false, true)->Arg(32)->UseRealTime();
// One kernel each for BF16 and FP8 weights: the fp32 streaming kernel and the bf16 dot kernel.
BENCHMARK_CAPTURE(BM_Weights, bf16_f32stream, DType::BF16, false, false, QuantPath::StreamF32)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, bf16_dot, DType::BF16, false, false, QuantPath::Bf16Dot)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, fp8_f32stream, DType::F8_E4M3, false, false, QuantPath::StreamF32)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();
// CPUs without AVX-512: the fp32 streaming kernel and the int8 one on 256-bit vectors, Q8_0 and MXFP4.
BENCHMARK_CAPTURE(BM_Weights, q8_0_avx2, DType::Q8_0, false, false, QuantPath::StreamAvx2)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, q8_0_int8avx2, DType::Q8_0, false, false, QuantPath::Int8Avx2)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, mxfp4_avx2, DType::MXFP4, false, false, QuantPath::StreamAvx2)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, mxfp4_int8avx2, DType::MXFP4, false, false, QuantPath::Int8Avx2)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Weights, fp8_dot, DType::F8_E4M3, false, false, QuantPath::Bf16Dot)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->UseRealTime();

// A decode step's experts as ZAYA1-8B's checkpoints hold them: per layer gate_up [16, 4096, 2048] and down
// [16, 2048, 2048] in `fmt`, packed (the sources released, as a loaded model does), B rows routed at random
// (batch 16: about 10 experts a layer, 1-4 rows each; batch 4: ~3.6 experts of ~1 row), over 10 layers' own
// copies (0.7 GB in MXFP4, 1.3 in Q8_0: far beyond any cache). Time per layer; GB/s counts the experts read.
void decode_experts(benchmark::State& state, DType fmt, int B) {
  constexpr int kLayers = 10;
  struct Layer {
    Tensor gate_up, down;
    std::vector<int64_t> offsets;  // [17]
  };
  static std::vector<Layer> layers;  // one (format, batch) set resident at a time, built on its first run
  static std::pair<int, int> built_for{-1, -1};
  if (built_for != std::make_pair(int(fmt), B)) {
    layers.clear();
    auto experts = [fmt](int64_t N, int64_t K, uint32_t seed) {
      Tensor f = weights(DType::F32, 16 * N, K, seed);
      Tensor q = quantize(Tensor::view(DType::F32, {16, N, K}, f.data, f.owner), fmt);
      pack_for_decode(q, /*release_source=*/true);
      return q;
    };
    for (int l = 0; l < kLayers; l++) {
      Layer L{experts(4096, 2048, 2 * l), experts(2048, 2048, 2 * l + 1), std::vector<int64_t>(17, 0)};
      std::mt19937 rng(l);
      for (int t = 0; t < B; t++) L.offsets[1 + rng() % 16]++;
      for (int e = 0; e < 16; e++) L.offsets[e + 1] += L.offsets[e];
      layers.push_back(std::move(L));
    }
    built_for = {int(fmt), B};
  }
  const std::vector<Layer>& ls = layers;
  Tensor x = activations(B, 2048), gu = activations(B, 4096), y = activations(B, 2048);
  double bytes = 0;  // the experts a layer's rows read, averaged over the layers
  const double row_bytes = double(dtype_row_bytes(fmt, 2048));
  for (const Layer& L : ls)
    for (int e = 0; e < 16; e++)
      if (L.offsets[e + 1] > L.offsets[e]) bytes += (4096.0 + 2048.0) * row_bytes / kLayers;
  int l = 0;
  for (auto _ : state) {
    const Layer& L = ls[size_t(l++ % kLayers)];
    quant_grouped_linear_forward(gu.f32(), x.f32(), L.gate_up, L.offsets.data(), 16);
    quant_grouped_linear_forward(y.f32(), gu.f32(), L.down, L.offsets.data(), 16);
    benchmark::DoNotOptimize(y.f32());
  }
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_DecodeExperts16(benchmark::State& state) {
  decode_experts(state, DType::MXFP4, 16);
}
BENCHMARK(BM_DecodeExperts16)->UseRealTime()->Unit(benchmark::kMicrosecond);
// Args: batch. The formats of issue 14's table whose experts the VNNI kernels read.
void BM_DecodeExperts(benchmark::State& state, DType fmt) {
  decode_experts(state, fmt, int(state.range(0)));
}
BENCHMARK_CAPTURE(BM_DecodeExperts, mxfp4, DType::MXFP4)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DecodeExperts, q8_0, DType::Q8_0)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The ZAYA1-8B LM head as decode reads it: [262272, 2048] bf16 (1.07 GB, far beyond any cache), on huge
// pages as `--no-mmap` loads it, through the streaming path decode takes (M rows).
void BM_Head(benchmark::State& state) {
  const int64_t M = state.range(0), N = 262272, K = 2048;
  static Tensor W;
  if (!W.data) {
    const size_t nbytes = size_t(N * K) * 2;
    std::shared_ptr<void> mem = huge_alloc_shared(nbytes);
    W = Tensor::view(DType::BF16, {N, K}, mem.get(), mem);
    std::mt19937 rng(1);
    auto* p = W.bf16();
    for (int64_t i = 0; i < N * K; i++)
      p[i] = uint16_t(0x3c00 + (rng() & 0x3ff));  // small values, bytes differ
  }
  Tensor in = activations(M, K), out = activations(M, N);
  for (auto _ : state) {
    quant_linear_forward(out.f32(), N, in.f32(), M, W);
    benchmark::DoNotOptimize(out.f32());
  }
  state.counters["GB/s"] = benchmark::Counter(weight_bytes(W), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Head)->Arg(1)->Arg(4)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);

// A copy of BF16 W on huge pages (as `--no-mmap` places a checkpoint's matrices); a quantized W packed for
// the VNNI kernel instead (the packs live on huge pages).
Tensor for_decode(Tensor W) {
  if (W.dtype != DType::BF16) {
    pack_for_decode(W);
    return W;
  }
  std::shared_ptr<void> mem = huge_alloc_shared(size_t(W.nbytes()));
  std::memcpy(mem.get(), W.data, size_t(W.nbytes()));
  return Tensor::view(W.dtype, W.shape, mem.get(), mem);
}

// One ZAYA1-8B decode layer's products at one row, as a batch-1 step runs them, over 40 layers' own copies
// (on huge pages, as `--no-mmap` and the packs place them): the fused q/k/v [1536, 2048] and o [2048, 1024]
// in bf16, the router's first product [256, 2048] bf16, then one MXFP4 expert's gate_up [4096, 2048] and down
// [2048, 2048] (VNNI packs). GB/s over the layer's bytes; µs/layer is the time a step spends in them per
// layer. Small products pay their fork/join and prefetch ramp here, which the one-matrix rows above hide. The
// rows of one product alone (1-5) cycle 40 copies of one matrix (42-250 MB): on hosts with a large shared
// cache behind L2 part of them stays there, so those rows can read faster than memory (docs/quantization.md).
void BM_DecodeLayer(benchmark::State& state) {
  constexpr int kLayers = 40;
  struct Layer {
    Tensor qkv, o, router, gate_up, down;
  };
  static std::vector<Layer> layers;
  if (layers.empty()) {
    for (int l = 0; l < kLayers; l++)
      layers.push_back({for_decode(weights(DType::BF16, 1536, 2048, 5 * l)),
                        for_decode(weights(DType::BF16, 2048, 1024, 5 * l + 1)),
                        for_decode(weights(DType::BF16, 256, 2048, 5 * l + 2)),
                        for_decode(weights(DType::MXFP4, 4096, 2048, 5 * l + 3)),
                        for_decode(weights(DType::MXFP4, 2048, 2048, 5 * l + 4))});
  }
  // Arg: 0 = the whole layer, 1-5 = one of its products alone (q/k/v, o, router, gate_up, down).
  const int which = int(state.range(0));
  auto product = [&](const Layer& L, int i) -> const Tensor& {
    return i == 0 ? L.qkv : i == 1 ? L.o : i == 2 ? L.router : i == 3 ? L.gate_up : L.down;
  };
  double layer_bytes = 0;
  for (int i = 0; i < 5; i++)
    if (which == 0 || which == i + 1) layer_bytes += weight_bytes(product(layers[0], i));
  Tensor x = activations(1, 4096), y = activations(1, 4096);
  int l = 0;
  const LeafPoolScope leaf_pool(true);  // threaded as a decode step's forward runs them (model/zaya.cpp)
  for (auto _ : state) {
    const Layer& L = layers[size_t(l++ % kLayers)];
    for (int i = 0; i < 5; i++)
      if (which == 0 || which == i + 1)
        quant_linear_forward(y.f32(), product(L, i).dim(0), x.f32(), 1, product(L, i));
    benchmark::DoNotOptimize(y.f32());
  }
  state.counters["GB/s"] = benchmark::Counter(layer_bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeLayer)->DenseRange(0, 5)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The machine's threaded read bandwidth (core/mem_bandwidth.h, as `zaya bench decode` measures it), in the
// same run as the kernels above: their GB/s over this is the fraction a decode step could reach.
void BM_ReadBandwidth(benchmark::State& state) {
  static ReadBandwidthProbe probe;
  double gbs = 0;
  for (auto _ : state) gbs = probe.measure(1);
  state.counters["GB/s"] = gbs;
}
BENCHMARK(BM_ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zaya

BENCHMARK_MAIN();
