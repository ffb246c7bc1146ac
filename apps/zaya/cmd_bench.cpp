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
#include "model/zaya-backward.h"
#include "model/zaya-flops.h"
#include "model/zaya-init.h"
#include "model/zaya.h"
#include "train/clip.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace {

// The keys every `zaya bench` line carries: tokens/s from the median time, model GFLOP per token, achieved
// GFLOP/s, the GEMM peaks measured in the same run, and MFU against the peak of the dtype used.
nlohmann::json result_json(const char* bench, const std::string& dtype, const zaya::ZayaConfig& cfg,
                           int64_t B, int64_t S, std::vector<double> times, double gflop_per_token,
                           double peak32, double peak16) {
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2], tps = double(B * S) / median;
  nlohmann::json j;
  j["bench"] = bench;
  j["dtype"] = dtype;
  j["batch"] = B;
  j["seq"] = S;
  j["params_b"] = cfg.num_params() / 1e9;
  j["tokens_per_s"] = tps;
  j["seconds_median"] = median;
  j["model_gflop_per_token"] = gflop_per_token;
  j["achieved_gflops"] = tps * gflop_per_token;
  j["peak_gflops_fp32"] = peak32;
  j["peak_gflops_bf16"] = peak16;
  j["mfu"] = tps * gflop_per_token / (dtype == "bf16" ? peak16 : peak32);
  return j;
}

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
  nlohmann::json j = result_json("forward", dtype, c, B, S, times, zaya::forward_flops_per_token(c, S) / 1e9,
                                 peak32, peak16);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// Peak resident set size of this process in MB (VmHWM).
double peak_rss_mb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024.0;
}

// A full training step: recording forward, backward, clipping, the optimizer (Muon + AdamW split) and the
// bf16 weight refresh. Model FLOPs of a step = 3 x the forward's (recomputation's extra block forwards are
// not model FLOPs: they show as lower tokens/s and MFU). recompute: ForwardOptions::recompute.
int bench_train(const std::string& model_dir, const std::string& config, int64_t B, int64_t S,
                const std::string& dtype, int steps, uint64_t seed, const std::string& optimizer,
                bool recompute) {
  const zaya::DType dt = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  zaya::ZayaConfig cfg =
      model_dir.empty() ? zaya::load_config(config) : zaya::load_config(model_dir + "/config.json");
  zaya::train::TrainModel tm = zaya::train::TrainModel::create(cfg, model_dir, seed, dt);
  zaya::train::OptimConfig oc;
  oc.lr = 1e-4f;
  // "adamw": every parameter with AdamW, as the PyTorch baseline (torch.optim.AdamW) trains; "zaya": the
  // ZAYA1 split with Muon, whose Newton-Schulz iterations on every expert matrix cost more than the
  // forward and backward of a small batch (they amortise over ZAYA1's 16.8M-token batches).
  if (optimizer == "adamw")
    for (auto& g : oc.groups) g.kind = zaya::train::OptimKind::AdamW;
  zaya::train::Optimizer optim(tm.params, oc);
  std::mt19937 rng(uint32_t(seed) + 1);
  std::vector<int32_t> ids(B * S), targets(B * S);
  for (auto& id : ids) id = int32_t(3 + rng() % uint32_t(cfg.vocab_size - 3));
  for (int64_t i = 0; i < B * S; i++) targets[i] = i + 1 < B * S ? ids[i + 1] : ids[0];
  const double peak32 = zaya::measure_gemm_peak_gflops(zaya::DType::F32);
  const double peak16 = zaya::measure_gemm_peak_gflops(zaya::DType::BF16);

  zaya::ForwardScratch sc;
  zaya::ForwardResult res;
  std::vector<double> times;
  // Seconds per stage of the timed steps (summed, divided by the step count at the end).
  const char* stage_names[] = {"zero_grads", "forward", "backward", "clip", "optimizer", "refresh_compute"};
  double stage_s[6] = {0, 0, 0, 0, 0, 0};
  size_t act_bytes = 0, block_bytes = 0;
  for (int r = 0; r <= steps; r++) {  // r == 0 is the warm-up
    auto t0 = std::chrono::steady_clock::now();
    auto lap = t0;
    auto stage_done = [&](int k) {
      auto now = std::chrono::steady_clock::now();
      if (r > 0) stage_s[k] += std::chrono::duration<double>(now - lap).count();
      lap = now;
    };
    tm.grads.zero();
    stage_done(0);
    zaya::Activations acts;
    zaya::ForwardOptions fo;
    fo.all_logits = false;
    fo.record = &acts;
    fo.recompute = recompute;
    zaya::ZayaCache cache(cfg, B);
    zaya::zaya_forward(tm.compute, cache, ids.data(), nullptr, B, S, fo, res, sc);
    stage_done(1);
    zaya::zaya_backward(tm.compute, acts, targets.data(), tm.grads, 0, &sc);
    stage_done(2);
    zaya::train::clip_grad_norm(tm.params, 1.0f);
    stage_done(3);
    optim.step(tm.params, 1e-4f);
    stage_done(4);
    tm.refresh_compute();
    stage_done(5);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) times.push_back(s);
    // Kept by the forward for the backward; with recomputation, plus one block's full recording at a time.
    act_bytes = acts.bytes();
    block_bytes = recompute ? acts.block_bytes : 0;
    std::fprintf(stderr, "bench train: %s %d/%d  %.3f s  %.1f tok/s\n", r ? "step" : "warm-up", r, steps, s,
                 B * S / s);
  }
  const double weights_mb = tm.weight_bytes() / 1e6;
  const double compute_copy_mb = dt == zaya::DType::BF16 ? weights_mb / 2 : 0;  // bf16 GEMM weights (approx.)
  nlohmann::json j = result_json("train", dtype, cfg, B, S, times,
                                 3.0 * zaya::forward_flops_per_token(cfg, S) / 1e9, peak32, peak16);
  j["optimizer"] = optimizer;
  j["recompute"] = recompute;
  nlohmann::json stages;
  for (int k = 0; k < 6; k++) stages[stage_names[k]] = stage_s[k] / std::max(1, steps);
  j["stage_seconds"] = stages;
  j["peak_rss_mb"] = peak_rss_mb();
  j["theoretical_mb"] =
      weights_mb * 2 + optim.state_bytes() / 1e6 + (act_bytes + block_bytes) / 1e6 + compute_copy_mb;
  // activations: what the forward keeps for the backward; recompute_block: the one block's full recording
  // the backward re-runs into (0 without recomputation).
  j["theoretical_breakdown_mb"] = {{"weights", weights_mb},
                                   {"grads", weights_mb},
                                   {"optimizer", optim.state_bytes() / 1e6},
                                   {"activations", act_bytes / 1e6},
                                   {"recompute_block", block_bytes / 1e6},
                                   {"bf16_weight_copy", compute_copy_mb}};
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
  auto* trn =
      app.add_subcommand("train", "full training steps (forward, backward, optimizer) on random tokens");
  std::string t_model, t_config, t_dtype = "fp32";
  int64_t tB = 4, tS = 512;
  int t_steps = 3;
  std::string t_optim = "adamw";
  auto* tm = trn->add_option("--model", t_model, "HF checkpoint directory");
  trn->add_option("--config", t_config, "model config.json (random initialisation)")->excludes(tm);
  trn->add_option("--batch", tB, "batch rows");
  trn->add_option("--seq", tS, "tokens per row");
  trn->add_option("--steps", t_steps, "timed steps after one warm-up (median reported)");
  trn->add_option("--dtype", t_dtype, "GEMM dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  trn->add_option("--seed", seed, "weights/tokens seed");
  trn->add_option("--optimizer", t_optim,
                  "adamw (every parameter, like the PyTorch baseline) or zaya (Muon split)")
      ->check(CLI::IsMember({"adamw", "zaya"}));
  bool t_recompute = false;
  trn->add_flag("--recompute", t_recompute,
                "activation recomputation: keep each block's input only, re-run the block in the backward");
  CLI11_PARSE(app, argc, argv);
  if (trn->parsed()) {
    ZAYA_CHECK(!t_model.empty() || !t_config.empty(), "zaya bench train needs --model DIR or --config FILE");
    ZAYA_CHECK(tB > 0 && tS > 0 && t_steps > 0, "--batch, --seq and --steps must be positive");
    return bench_train(t_model, t_config, tB, tS, t_dtype, t_steps, seed, t_optim, t_recompute);
  }
  if (fwd->parsed()) {
    ZAYA_CHECK(!model_dir.empty() || !config.empty(),
               "zaya bench forward needs --model DIR or --config FILE");
    ZAYA_CHECK(B > 0 && S > 0 && repeats > 0, "--batch, --seq and --repeats must be positive");
    return bench_forward(model_dir, config, B, S, dtype, repeats, seed);
  }
  return 2;
}

zaya::app::Register reg("bench", "benchmarks (forward, train): tokens/s, GFLOP/s, MFU vs measured GEMM peak",
                        cmd_bench);

}  // namespace
