// zaya bench forward: tokens/s of the forward pass and MFU against this machine's own GEMM peak, measured
// in the same run. Prints one JSON line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "core/error.h"
#include "kernels/gemm.h"
#include "model/zaya-flops.h"
#include "model/zaya-init.h"
#include "model/zaya.h"

namespace {

int bench_forward(const std::string& model_dir, const std::string& config, int64_t B, int64_t S,
                  const std::string& dtype, int repeats, uint64_t seed) {
  const zaya::DType dt = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  zaya::ZayaModel model;
  if (!model_dir.empty()) {
    zaya::LoadOptions lo;
    lo.compute = dt;
    model = zaya::ZayaModel::load(model_dir, lo);
  } else {
    model.cfg = zaya::load_config(config);
    model.w = zaya::init_weights(model.cfg, dt, seed);
  }
  const auto& c = model.cfg;
  std::mt19937 rng(uint32_t(seed) + 1);
  std::vector<int32_t> ids(B * S);
  for (auto& id : ids) id = int32_t(3 + rng() % uint32_t(c.vocab_size - 3));

  const double peak32 = zaya::measure_gemm_peak_gflops(zaya::DType::F32);
  const double peak16 = zaya::measure_gemm_peak_gflops(zaya::DType::BF16);

  zaya::ForwardScratch sc;
  zaya::ForwardResult res;
  zaya::ForwardOptions opt;
  std::vector<double> times;
  for (int r = 0; r <= repeats; r++) {  // r == 0 is the warm-up
    zaya::ZayaCache cache(c, B);
    auto t0 = std::chrono::steady_clock::now();
    zaya::zaya_forward(model, cache, ids.data(), nullptr, B, S, opt, res, sc);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) times.push_back(s);
    std::fprintf(stderr, "bench forward: %s %d/%d  %.3f s  %.1f tok/s\n", r ? "run" : "warm-up", r, repeats,
                 s, B * S / s);
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  double tps = B * S / median;
  double gflop_tok = zaya::forward_flops_per_token(c, S) / 1e9;
  double achieved = tps * gflop_tok;
  nlohmann::json j;
  j["bench"] = "forward";
  j["dtype"] = dtype;
  j["batch"] = B;
  j["seq"] = S;
  j["params_b"] = c.num_params() / 1e9;
  j["tokens_per_s"] = tps;
  j["seconds_median"] = median;
  j["model_gflop_per_token"] = gflop_tok;
  j["achieved_gflops"] = achieved;
  j["peak_gflops_fp32"] = peak32;
  j["peak_gflops_bf16"] = peak16;
  j["mfu"] = achieved / (dt == zaya::DType::BF16 ? peak16 : peak32);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Benchmarks: tokens/s and MFU against the machine's measured GEMM peak"};
  app.require_subcommand(1);
  auto* fwd = app.add_subcommand("forward", "forward pass over a batch of random tokens");
  std::string model_dir, config, dtype = "fp32";
  int64_t B = 4, S = 512;
  int repeats = 3;
  uint64_t seed = 0;
  auto* m = fwd->add_option("--model", model_dir, "HF checkpoint directory");
  fwd->add_option("--config", config, "model config.json (random initialisation)")->excludes(m);
  fwd->add_option("--batch", B, "batch rows");
  fwd->add_option("--seq", S, "tokens per row");
  fwd->add_option("--dtype", dtype, "GEMM dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  fwd->add_option("--repeats", repeats, "timed runs after one warm-up (median reported)");
  fwd->add_option("--seed", seed, "weights/tokens seed");
  CLI11_PARSE(app, argc, argv);
  if (fwd->parsed()) {
    ZAYA_CHECK(!model_dir.empty() || !config.empty(),
               "zaya bench forward needs --model DIR or --config FILE");
    ZAYA_CHECK(B > 0 && S > 0 && repeats > 0, "--batch, --seq and --repeats must be positive");
    return bench_forward(model_dir, config, B, S, dtype, repeats, seed);
  }
  return 2;
}

zaya::app::Register reg("bench", "benchmarks (forward): tokens/s, GFLOP/s, MFU vs measured GEMM peak",
                        cmd_bench);

}  // namespace
