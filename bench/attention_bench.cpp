// Attention speed as training runs it: one sequence per thread (every thread of the pool busy with its own
// sequence, kernels single-threaded inside), forward with the log-sum-exp and the backward that recomputes
// the probabilities. Shape of configs/mid.json (8 query heads, 2 KV heads, head_dim 64) unless the args say.
// GFLOP/s count the causal half only (Q·Kᵀ and P·V forward: 4·S·ctx·Hq·d; backward 2.5x that).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/cca.h"

using namespace zaya;

namespace {

struct AttentionCase {
  int64_t S, Hq, Hk, d;
  DType gemm_dtype = DType::F32;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<int64_t> pos;
  AttentionArgs args() const {
    AttentionArgs a;
    a.S = S, a.Hq = Hq, a.Hk = Hk, a.d = d, a.n_keys = S, a.key_pos0 = 0, a.key_stride = S * d;
    a.gemm_dtype = gemm_dtype;
    return a;
  }
  AttentionCase(int64_t S_, int64_t Hq_, int64_t Hk_, int64_t d_, uint32_t seed)
      : S(S_), Hq(Hq_), Hk(Hk_), d(d_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (float& e : x) e = normal(rng);
    };
    fill(q, size_t(S * Hq * d));
    fill(k, size_t(S * Hk * d));
    fill(v, size_t(S * Hk * d));
    fill(dout, size_t(S * Hq * d));
    out.assign(size_t(S * Hq * d), 0.f);
    lse.assign(size_t(S * Hq), 0.f);
    dq.assign(q.size(), 0.f);
    dk.assign(k.size(), 0.f);
    dv.assign(v.size(), 0.f);
    pos.resize(size_t(S));
    for (int64_t t = 0; t < S; t++) pos[size_t(t)] = t;
  }
  // Forward reads k, v head-major [Hk, S, d]; the backward token-major [S, Hk·d]: the same buffers serve
  // both (the values differ, the work does not).
  void forward() {
    attention_forward(out.data(), lse.data(), q.data(), Hq * d, k.data(), v.data(), pos.data(), nullptr,
                      args());
  }
  void backward() {
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), Hq * d, k.data(), Hk * d,
                       v.data(), Hk * d, lse.data(), pos.data(), nullptr, args());
  }
};

double causal_flops(int64_t S, int64_t Hq, int64_t d) {
  return 4.0 * double(S) * (double(S) + 1) / 2 * double(Hq) * double(d);
}

// Args: S, Hq, Hk, d, pass (0 forward, 1 backward), products (0 fp32, 1 bf16 operands).
void BM_AttentionPerThread(benchmark::State& state) {
  const int64_t S = state.range(0), Hq = state.range(1), Hk = state.range(2), d = state.range(3);
  const bool backward = state.range(4) != 0;
  const DType products = state.range(5) ? DType::BF16 : DType::F32;
  const int nt = num_threads();
  std::vector<AttentionCase> cases;
  for (int i = 0; i < nt; i++) {
    cases.emplace_back(S, Hq, Hk, d, uint32_t(i + 1));
    cases.back().gemm_dtype = products;
  }
  for (auto& c : cases) c.forward();  // the lse the backward needs
  for (auto _ : state) {
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int i = 0; i < nt; i++) backward ? cases[size_t(i)].backward() : cases[size_t(i)].forward();
  }
  state.SetLabel(std::string(backward ? "backward " : "forward ") + dtype_name(products));
  const double flops = causal_flops(S, Hq, d) * (backward ? 2.5 : 1.0) * nt;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionPerThread)
    ->ArgsProduct({{512}, {8}, {2}, {64}, {0, 1}, {0, 1}})
    ->ArgsProduct({{2048}, {8}, {2}, {64}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Decode: one query per sequence against a cache of N keys, threaded by the pool as `zaya generate` runs it
// (attention_rows). Shape of ZAYA1-8B (8 query heads, 2 KV heads, head_dim 128) unless the args say. GB/s
// counts the keys and values once (what the step must read; the 4 query heads of a KV head share them).
// Args: N keys, Hq, Hk, d, cold (1: the iterations go round copies of the cache, 128 MB in all, so each call
// reads its keys and values from memory, as a decode step does after the layers' weights have streamed
// through the caches; 0: the same cache every call, from L2 / L3), cache dtype (0: fp32, attention_forward;
// 1: bf16, attention_forward_kv16: `--kv-cache bf16`).
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t N = state.range(0), Hq = state.range(1), Hk = state.range(2), d = state.range(3);
  const bool kv16 = state.range(5) != 0;
  const size_t elem = kv16 ? sizeof(uint16_t) : sizeof(float);
  const size_t kv = size_t(Hk * N * d);  // elements of K (and of V) in one copy
  const size_t copies = state.range(4) ? std::max<size_t>(1, (size_t(128) << 20) / (2 * kv * elem)) : 1;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(size_t(Hq * d)), k(kv * (kv16 ? 1 : copies)), v(k.size()), out(q.size());
  for (std::vector<float>* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  std::vector<uint16_t> k16, v16;  // bf16 copies of the cache
  if (kv16) {
    k16.resize(kv * copies);
    v16.resize(kv * copies);
    for (size_t c = 0; c < copies; c++) {
      convert_f32_to_bf16(k16.data() + c * kv, k.data(), int64_t(kv));
      convert_f32_to_bf16(v16.data() + c * kv, v.data(), int64_t(kv));
    }
  }
  const int64_t pos = N - 1;
  AttentionArgs a;
  a.S = 1, a.Hq = Hq, a.Hk = Hk, a.d = d, a.n_keys = N, a.key_pos0 = 0, a.key_stride = N * d;
  size_t c = 0;
  for (auto _ : state) {
    if (kv16)
      attention_forward_kv16(out.data(), nullptr, q.data(), Hq * d, k16.data() + c * kv, v16.data() + c * kv,
                             &pos, nullptr, a);
    else
      attention_forward(out.data(), nullptr, q.data(), Hq * d, k.data() + c * kv, v.data() + c * kv, &pos,
                        nullptr, a);
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % copies;
  }
  state.SetLabel(std::string(state.range(4) ? "cold" : "hot") + (kv16 ? ", bf16 cache" : ", fp32 cache"));
  const double bytes = 2.0 * double(kv) * double(elem);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{512, 4096, 32768}, {8}, {2}, {128}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A decode step's grouped CCA convolution of one layer (cca_grouped_taps_forward) for T positions, ZAYA1-8B's
// shape (10 groups of 128 outputs, 256 inputs each; weights with bf16 values, as a bf16 checkpoint's), over
// the weights as stored (form 0: a dot_f32 per output) or over the inference pack (form 1: bf16, one fma
// chain per output, 16 outputs a vector). GB/s counts the weights the form reads. Args: T, form, cold (1: the
// iterations go round 128 MB of weight copies, so each call reads them from memory as a decode step does
// after the experts streamed through the caches; 0: the same layer every call).
void BM_CcaConvDecode(benchmark::State& state) {
  const int64_t T = state.range(0);
  const bool packed = state.range(1) != 0;
  const CcaDims dm{8, 2, 128, 2, 2};
  const int64_t C = dm.C(), d = dm.d, groups = dm.Hq + dm.Hk, K = d * dm.t1;
  const size_t layer_bytes = size_t(C * K) * (packed ? 2 : 4);
  const size_t copies = state.range(2) ? (size_t(128) << 20) / layer_bytes : 1;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> w1(static_cast<size_t>(C * K)), b1(static_cast<size_t>(C)),
      taps(static_cast<size_t>(T * groups * K)), out(static_cast<size_t>(T * C));
  for (std::vector<float>* x : {&w1, &b1, &taps})
    for (float& e : *x) e = normal(rng);
  for (float& w : w1) {  // bf16 values: the pack holds bf16
    uint32_t bits;
    std::memcpy(&bits, &w, 4);
    bits &= 0xFFFF0000u;
    std::memcpy(&w, &bits, 4);
  }
  std::vector<std::vector<float>> weights;
  std::vector<CcaConvPack> packs;
  for (size_t i = 0; i < copies; i++) {
    if (packed)
      packs.push_back(cca_conv_pack(w1.data(), C, d, dm.t1));
    else
      weights.push_back(w1);
  }
  if (packed && packs[0].empty()) {
    state.SkipWithError("no inference pack on this build (AVX-512 only)");
    return;
  }
  size_t c = 0;
  for (auto _ : state) {
    cca_grouped_taps_forward(out.data(), taps.data(), packed ? w1.data() : weights[c].data(), b1.data(), T,
                             /*dot_form=*/true, dm, packed ? &packs[c] : nullptr);
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % copies;
  }
  state.SetLabel(std::string(packed ? "pack" : "dot_f32") + (state.range(2) ? " cold" : " hot"));
  state.counters["GB/s"] =
      benchmark::Counter(double(layer_bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CcaConvDecode)
    ->ArgsProduct({{1, 4, 16}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
