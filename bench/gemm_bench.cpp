// GEMM throughput (GFLOP/s counter) on the products of the mid-size config (configs/mid.json: 4 x 512 = 2048
// tokens, hidden 1024, 16 experts, vocab 32768), per backend and dtype, plus the grouped expert GEMMs and the
// machine's measured peak.
//
// Layouts: "fwd" y = x·Wᵀ (NT), "dx" dX = dY·W (NN), "dw" dW += dYᵀ·X (TN; beta = 1, as the backward
// accumulates weight gradients, so C is read and written once per call).
// Dtypes: "f32"; "bf16" both operands stored bf16; "mixed" fp32 activations x bf16 weights (the inference
// path: the activations are rounded into a scratch buffer inside gemm()).
//
// The build machine is shared, so compare variants with interleaved repetitions and take the best:
//   ./bench/gemm_bench --benchmark_filter=lm_head --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_min_time=0.2   (one command line)
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"

namespace zaya {
namespace {

constexpr int64_t kTokens = 2048, kHidden = 1024, kExperts = 16, kExpertHidden = 1024, kVocab = 32768;

Tensor random_tensor(DType dtype, const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(dtype, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); i++) {
    if (dtype == DType::F32) {
      t.f32()[i] = dist(rng);
    } else {
      t.bf16()[i] = f32_to_bf16(dist(rng));
    }
  }
  return t;
}

void set_gflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

enum class Layout { Fwd, Dx, Dw };

// One product of the model. fwd: M=tokens, N=out, K=in. dx: M=tokens, N=in, K=out. dw: M=out, N=in, K=tokens.
struct Product {
  const char* name;
  Layout layout;
  int64_t M, N, K;
};

void bench_gemm(benchmark::State& state, Product p, GemmBackend backend, const std::string& types) {
  const DType a_type = types == "bf16" ? DType::BF16 : DType::F32;
  const DType b_type = types == "f32" ? DType::F32 : DType::BF16;
  // Stored shapes: fwd A [M,K], B = W [N,K] (trans); dx A [M,K], B = W [K,N]; dw A = dY [K,M] (trans), B
  // [K,N].
  const bool trans_a = p.layout == Layout::Dw, trans_b = p.layout == Layout::Fwd;
  Tensor a = random_tensor(a_type, trans_a ? Shape{p.K, p.M} : Shape{p.M, p.K}, 1);
  Tensor b = random_tensor(b_type, trans_b ? Shape{p.N, p.K} : Shape{p.K, p.N}, 2);
  Tensor c = Tensor::empty(DType::F32, {p.M, p.N});  // zero-filled
  const MatRef A = mat(a, trans_a ? p.M : p.K, trans_a), B = mat(b, trans_b ? p.K : p.N, trans_b);
  for (auto _ : state) {
    gemm_with(backend, p.M, p.N, p.K, 1.0f, A, B, p.layout == Layout::Dw ? 1.0f : 0.0f, c.f32(), p.N);
    benchmark::DoNotOptimize(c.data);
    benchmark::ClobberMemory();
  }
  set_gflops(state, 2.0 * p.M * p.N * p.K);
}

// Row ranges of `tokens` tokens over kExperts experts. "uniform": each token to a random expert; "skewed": a
// Zipf-like spread with some experts empty; "decode": few tokens, most experts get 0-2 rows.
std::vector<int64_t> expert_offsets(const std::string& spread, int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> weight(kExperts, 1.0);
  if (spread == "skewed") {
    for (int64_t e = 0; e < kExperts; e++) weight[e] = e % 4 == 3 ? 0.0 : 1.0 / double(e + 1);
  }
  std::discrete_distribution<int64_t> pick(weight.begin(), weight.end());
  std::vector<int64_t> rows(kExperts, 0);
  for (int64_t t = 0; t < tokens; t++) rows[pick(rng)]++;
  std::vector<int64_t> offsets = {0};
  for (int64_t r : rows) offsets.push_back(offsets.back() + r);
  return offsets;
}

// The MoE expert products of one layer: out[T, N] = in[T, K] · W[e]ᵀ per expert. With `varying`, each
// iteration uses a different routing (16 pre-drawn), as in training, so fixed-M primitives meet new row
// counts.
void bench_grouped(benchmark::State& state, int64_t N, int64_t K, DType w_type, std::string spread,
                   int64_t tokens, GroupedSchedule schedule, GemmBackend backend, bool varying) {
  Tensor in = random_tensor(DType::F32, {tokens, K}, 3);
  Tensor w = random_tensor(w_type, {kExperts, N, K}, 4);
  Tensor out = Tensor::empty(DType::F32, {tokens, N});
  std::vector<std::vector<int64_t>> routings;
  for (uint32_t s = 0; s < (varying ? 16u : 1u); s++)
    routings.push_back(expert_offsets(spread, tokens, 100 + s));
  size_t i = 0;
  for (auto _ : state) {
    const std::vector<int64_t>& offsets = routings[i++ % routings.size()];
    grouped_linear_forward_with(schedule, backend, out.f32(), in.f32(), w, offsets.data(), kExperts);
    benchmark::DoNotOptimize(out.data);
    benchmark::ClobberMemory();
  }
  set_gflops(state, 2.0 * tokens * N * K);
}

void bench_peak(benchmark::State& state, DType dtype) {
  double gflops = 0;
  for (auto _ : state) gflops = measure_gemm_peak_gflops(dtype);
  state.counters["GFLOP/s"] = gflops;
}

const char* layout_name(Layout l) {
  return l == Layout::Fwd ? "fwd" : l == Layout::Dx ? "dx" : "dw";
}

int register_all() {
  const int64_t T = kTokens, H = kHidden, I = kExpertHidden;
  const int64_t rows_per_expert = T / kExperts;  // 128 with top-1 routing
  const std::vector<Product> products = {
      {"qk_proj", Layout::Fwd, T, 1280, H},
      {"v_proj", Layout::Fwd, T, 64, H},
      {"o_proj", Layout::Fwd, T, H, H},
      {"router_down", Layout::Fwd, T, 256, H},
      {"router_mlp", Layout::Fwd, T, 256, 256},
      {"expert_gate_up", Layout::Fwd, rows_per_expert, 2 * I, H},
      {"expert_down", Layout::Fwd, rows_per_expert, H, I},
      {"lm_head", Layout::Fwd, T, kVocab, H},
      // Training: input gradients (NN) and weight gradients (TN).
      {"qk_proj", Layout::Dx, T, H, 1280},
      {"qk_proj", Layout::Dw, 1280, H, T},
      {"o_proj", Layout::Dx, T, H, H},
      {"o_proj", Layout::Dw, H, H, T},
      {"expert_gate_up", Layout::Dx, rows_per_expert, H, 2 * I},
      {"expert_gate_up", Layout::Dw, 2 * I, H, rows_per_expert},
      {"lm_head", Layout::Dx, T, H, kVocab},
      {"lm_head", Layout::Dw, kVocab, H, T},
      {"expert_down", Layout::Dx, rows_per_expert, I, H},
      {"expert_down", Layout::Dw, H, I, rows_per_expert},
      // The LM head + cross-entropy backward works in chunks of 512 rows (model/zaya-backward.cpp).
      {"lm_head_chunk", Layout::Fwd, 512, kVocab, H},
      {"lm_head_chunk", Layout::Dx, 512, H, kVocab},
      {"lm_head_chunk", Layout::Dw, kVocab, H, 512},
      // The main job's model (configs/small.json, 16 x 128 tokens): vocab 8192, hidden 256.
      {"small_lm_head", Layout::Fwd, T, 8192, 256},
      {"small_lm_head", Layout::Dx, T, 256, 8192},
      {"small_lm_head", Layout::Dw, 8192, 256, T},
      // Decode (one or a few tokens) and per-head attention-sized products: here call overhead matters.
      {"decode_qk_proj", Layout::Fwd, 1, 1280, H},
      {"decode_lm_head", Layout::Fwd, 1, kVocab, H},
      {"decode16_lm_head", Layout::Fwd, 16, kVocab, H},
      {"decode16_qk_proj", Layout::Fwd, 16, 1280, H},
      {"rows1_gate_up", Layout::Fwd, 1, 2 * I, H},
      {"rows2_gate_up", Layout::Fwd, 2, 2 * I, H},
      {"decode4_o_proj", Layout::Fwd, 4, H, H},
      {"rows8_gate_up", Layout::Fwd, 8, 2 * I, H},
      {"rows16_gate_up", Layout::Fwd, 16, 2 * I, H},
      {"rows32_gate_up", Layout::Fwd, 32, 2 * I, H},
      {"rows64_gate_up", Layout::Fwd, 64, 2 * I, H},
      {"head_scores", Layout::Fwd, 512, 512, 64},
      {"head_values", Layout::Dx, 512, 64, 512},
      {"tiny", Layout::Fwd, 16, 16, 16},
      {"tiny", Layout::Fwd, 32, 32, 32},
      {"tiny", Layout::Fwd, 48, 48, 48},
      {"tiny", Layout::Fwd, 64, 64, 64},
      {"decode_small", Layout::Fwd, 1, 256, 256},
      {"decode_small", Layout::Fwd, 1, 1024, 256},
  };
  struct Variant {
    GemmBackend backend;
    const char* types;
  };
  const std::vector<Variant> variants = {
      {GemmBackend::OneDnn, "f32"},
      {GemmBackend::OneDnnRuntimeM, "f32"},
      {GemmBackend::OpenBlas, "f32"},
      {GemmBackend::OneDnn, "bf16"},
      {GemmBackend::OneDnnRuntimeM, "bf16"},
      {GemmBackend::OneDnnRuntimeMK, "bf16"},
      {GemmBackend::Auto, "f32"},
      {GemmBackend::Auto, "bf16"},
      {GemmBackend::Auto, "mixed"},
      {GemmBackend::Reference, "f32"},
      {GemmBackend::Small, "f32"},
      {GemmBackend::RowInvariant, "f32"},
      {GemmBackend::RowInvariant, "mixed"},
  };
  for (const Product& p : products) {
    for (const Variant& v : variants) {
      if (v.types == std::string("mixed") && p.layout != Layout::Fwd) continue;
      if (v.backend == GemmBackend::OneDnnRuntimeMK && p.layout != Layout::Dw) continue;  // weight gradients
      if (v.backend == GemmBackend::Reference && double(p.M) * p.N * p.K > 1e6)
        continue;                                                                    // too slow to matter
      if (v.backend == GemmBackend::Small && 2.0 * p.M * p.N * p.K > 2e7) continue;  // tiny products only
      std::string name = std::string("gemm/") + p.name + "/" + layout_name(p.layout) + "/" +
                         std::to_string(p.M) + "x" + std::to_string(p.N) + "x" + std::to_string(p.K) + "/" +
                         gemm_backend_name(v.backend) + "/" + v.types;
      benchmark::RegisterBenchmark(name.c_str(), bench_gemm, p, v.backend, std::string(v.types))
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  // Grouped expert GEMMs of one MoE layer: gate_up [16, 2048, 1024] and down [16, 1024, 1024].
  struct GroupedCase {
    const char* name;
    int64_t N, K;
    const char* spread;
    int64_t tokens;
    bool varying;
  };
  const std::vector<GroupedCase> grouped = {
      {"gate_up", 2 * I, H, "uniform", T, false}, {"down", H, I, "uniform", T, false},
      {"gate_up", 2 * I, H, "uniform", T, true},  {"gate_up", 2 * I, H, "skewed", T, false},
      {"gate_up", 2 * I, H, "decode", 16, false}, {"gate_up", 2 * I, H, "decode", 64, false},
  };
  for (const GroupedCase& g : grouped) {
    for (DType w_type : {DType::F32, DType::BF16}) {
      for (GroupedSchedule s :
           {GroupedSchedule::Auto, GroupedSchedule::Sequential, GroupedSchedule::ExpertParallel}) {
        for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM}) {
          // The Auto schedule with explicit backends repeats the Sequential/ExpertParallel rows; skip it.
          if (s == GroupedSchedule::Auto && b != GemmBackend::Auto) continue;
          std::string name = std::string("grouped/") + g.name + "/" + g.spread +
                             (g.varying ? "-varying" : "") + "/T=" + std::to_string(g.tokens) + "/" +
                             grouped_schedule_name(s) + "/" + gemm_backend_name(b) + "/" + dtype_name(w_type);
          benchmark::RegisterBenchmark(name.c_str(), bench_grouped, g.N, g.K, w_type, std::string(g.spread),
                                       g.tokens, s, b, g.varying)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
      }
    }
  }
  for (DType t : {DType::F32, DType::BF16}) {
    benchmark::RegisterBenchmark((std::string("peak/") + dtype_name(t)).c_str(), bench_peak, t)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1)
        ->UseRealTime();
  }
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace zaya
