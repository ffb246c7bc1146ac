// zaya bench forward: tokens/s of the forward pass and MFU against this machine's own GEMM peak, measured
// in the same run. Prints one JSON line.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_decode.h"
#include "bench_eval.h"
#include "bench_serve.h"
#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "cli.h"
#include "command.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "load_flags.h"
#include "model/zaya-backward.h"
#include "model/zaya-flops.h"
#include "model/zaya-init.h"
#include "model/zaya.h"
#include "train/balancer.h"
#include "train/muon.h"
#include "train/optimizer.h"
#include "train/param_groups.h"
#include "train/train_model.h"
#include "train/train_step.h"

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
  // The fastest repetition against the peak, which is itself the best of its calls
  // (measure_gemm_peak_gflops): the same statistic on both sides. On a shared host the median repetition
  // carries the neighbours' load that the best peak call escaped, so `mfu` reads low by that much; both are
  // printed.
  j["seconds_best"] = times.front();
  j["mfu_best"] = double(B * S) / times.front() * gflop_per_token / (dtype == "bf16" ? peak16 : peak32);
  j["batch_invariant"] = zaya::gemm_batch_invariant();
  j["cpu"] = zaya::cpu_summary();  // the figures depend on it: Zen 5's bf16 peak is about twice a Zen 4's
  j["omp_wait"] = zaya::omp_wait_summary();  // and on this: core/threads.h
  return j;
}

int bench_forward(const std::string& model_dir, const std::string& config, int64_t B, int64_t S,
                  const std::string& dtype, int repeats, uint64_t seed, zaya::Semantics semantics,
                  bool in_memory) {
  const zaya::DType dt = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  zaya::ZayaModel model;
  if (!model_dir.empty()) {
    zaya::LoadOptions lo;
    lo.compute = dt;
    lo.semantics = semantics;
    lo.in_memory = in_memory;
    model = zaya::ZayaModel::load(model_dir, lo);
  } else {
    model.cfg = zaya::load_config(config);
    zaya::apply_semantics(model.cfg, semantics, config);
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
    zaya::profile_pause(r == 0);        // ZAYA_PROFILE reports the timed runs only
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

// A full training step: recording forward, backward, clipping, the optimizer (Muon + AdamW split) and the
// bf16 weight refresh. Model FLOPs of a step = 3 x the forward's (recomputation's extra block forwards are
// not model FLOPs: they show as lower tokens/s and MFU). recompute: ForwardOptions::recompute.
int bench_train(const std::string& model_dir, const std::string& config, int64_t B, int64_t S,
                const std::string& dtype, int steps, uint64_t seed, const std::string& optimizer,
                bool recompute, zaya::Semantics semantics, const std::string& ns_dtype) {
  const zaya::DType dt = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  zaya::ZayaConfig cfg =
      model_dir.empty() ? zaya::load_config(config) : zaya::load_config(model_dir + "/config.json");
  zaya::apply_semantics(cfg, semantics, model_dir.empty() ? config : model_dir + "/config.json");
  zaya::train::TrainModel tm = zaya::train::TrainModel::create(cfg, model_dir, seed, dt);
  zaya::train::OptimConfig oc;
  oc.lr = 1e-4f;  // constant schedule, grad_clip 1 (the defaults): every step a full update
  // "adamw": every parameter with AdamW, as the PyTorch baseline (torch.optim.AdamW) trains; "zaya": the
  // ZAYA1 split with Muon, whose Newton-Schulz iterations on every expert matrix cost more than the
  // forward and backward of a small batch (they amortise over ZAYA1's 16.8M-token batches).
  if (optimizer == "adamw")
    for (auto& g : oc.groups) g.kind = zaya::train::OptimKind::AdamW;
  oc.muon.ns_dtype = ns_dtype == "fp32" ? zaya::DType::F32 : zaya::DType::BF16;
  zaya::train::Optimizer optim(tm.params, oc);
  // Newton–Schulz FLOPs of one step: every matrix of every Muon group.
  double ns_flops = 0;
  for (const auto& g : optim.groups()) {
    if (g.kind != zaya::train::OptimKind::Muon) continue;
    for (size_t i : g.params) {
      const zaya::Shape& sh = tm.params[i].shape;
      const int64_t rows = sh[sh.size() - 2], cols = sh.back(), batch = zaya::shape_numel(sh) / (rows * cols);
      ns_flops += double(batch) * zaya::train::newton_schulz_flops(rows, cols, oc.muon.ns_steps);
    }
  }
  std::mt19937 rng(uint32_t(seed) + 1);
  std::vector<zaya::data::Batch> batch(1);
  batch[0].rows = B;
  batch[0].seq_len = S;
  batch[0].input_ids.resize(size_t(B * S));
  batch[0].targets.resize(size_t(B * S));
  for (auto& id : batch[0].input_ids) id = int32_t(3 + rng() % uint32_t(cfg.vocab_size - 3));
  for (int64_t i = 0; i < B * S; i++)
    batch[0].targets[size_t(i)] = batch[0].input_ids[size_t(i + 1 < B * S ? i + 1 : 0)];
  zaya::train::BalanceController balancer(cfg.num_hidden_layers, cfg.num_experts, oc.balancer);
  const double peak32 = zaya::measure_gemm_peak_gflops(zaya::DType::F32);
  const double peak16 = zaya::measure_gemm_peak_gflops(zaya::DType::BF16);

  zaya::ForwardScratch sc;
  std::vector<double> times;
  // Seconds per stage of the timed steps (summed, divided by the step count at the end): train_step's own
  // (train/train_step.h), so the bench times exactly what `zaya train` runs.
  const char* stage_names[] = {"zero_grads", "forward", "backward", "clip", "optimizer", "refresh_compute"};
  double stage_s[6] = {0, 0, 0, 0, 0, 0};
  size_t act_bytes = 0, block_bytes = 0;
  for (int r = 0; r <= steps; r++) {  // r == 0 is the warm-up
    zaya::profile_pause(r == 0);      // ZAYA_PROFILE reports the timed steps only
    auto t0 = std::chrono::steady_clock::now();
    const zaya::train::StepResult res =
        zaya::train::train_step(tm, optim, balancer, batch, oc, r + 1, sc, recompute);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ZAYA_CHECK(res.finite, "bench train: step ", r + 1, " was not finite (loss ", res.loss,
               ", gradient norm ", res.grad_norm, ")");
    if (r > 0) {
      times.push_back(s);
      const auto& st = res.seconds;
      const double parts[6] = {st.zero_grads, st.forward, st.backward, st.clip, st.optimizer, st.refresh};
      for (int k = 0; k < 6; k++) stage_s[k] += parts[k];
    }
    // Kept by the forward for the backward; with recomputation, plus one block's full recording at a time.
    const zaya::Activations& acts = sc.train_acts;
    act_bytes = acts.bytes();
    block_bytes = recompute ? acts.block_bytes : 0;
    std::fprintf(stderr, "bench train: %s %d/%d  %.3f s  %.1f tok/s  loss %.4f\n", r ? "step" : "warm-up", r,
                 steps, s, B * S / s, res.loss);
  }
  const double weights_mb = tm.weight_bytes() / 1e6;
  const double compute_copy_mb = dt == zaya::DType::BF16 ? weights_mb / 2 : 0;  // bf16 GEMM weights (approx.)
  nlohmann::json j = result_json("train", dtype, cfg, B, S, times,
                                 3.0 * zaya::forward_flops_per_token(cfg, S) / 1e9, peak32, peak16);
  j["optimizer"] = optimizer;
  j["recompute"] = recompute;
  if (ns_flops > 0) {
    // The optimizer stage against its Newton–Schulz work: GFLOP/s and the fraction of the bf16 (or fp32)
    // GEMM peak measured above (the momentum, decay and AdamW passes count as time, not FLOPs).
    const double opt_s = stage_s[4] / std::max(1, steps);
    j["ns_dtype"] = ns_dtype;
    j["newton_schulz_gflop"] = ns_flops / 1e9;
    j["optimizer_gflops"] = ns_flops / 1e9 / opt_s;
    j["optimizer_peak_fraction"] = ns_flops / 1e9 / opt_s / (ns_dtype == "fp32" ? peak32 : peak16);
    j["optimizer_over_forward_backward"] = opt_s / ((stage_s[1] + stage_s[2]) / std::max(1, steps));
  }
  nlohmann::json stages;
  for (int k = 0; k < 6; k++) stages[stage_names[k]] = stage_s[k] / std::max(1, steps);
  j["stage_seconds"] = stages;
  j["peak_rss_mb"] = zaya::peak_rss_mb();
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

// zaya bench checkpoint: the training-checkpoint path on a model's real state (fp32 weights + optimizer
// state): the stall of each asynchronous save (staging copy), its background write (bytes / seconds), the
// commit, and a verified load (read + checksums + assembly into the model), from a cold page cache.
int bench_checkpoint(const std::string& config, int64_t layers, const std::string& dir, int saves,
                     int io_threads, const std::string& optimizer, bool keep) {
  namespace fs = std::filesystem;
  using clock_type = std::chrono::steady_clock;
  auto since = [](clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  };
  zaya::ZayaConfig cfg = zaya::load_config(config);
  if (layers > 0) {
    cfg.num_hidden_layers = layers;
    cfg.layer_types.resize(size_t(layers),
                           cfg.layer_types.empty() ? zaya::LayerType::Hybrid : cfg.layer_types[0]);
  }
  zaya::train::TrainModel tm = zaya::train::TrainModel::create(cfg, "", 1, zaya::DType::F32);
  zaya::train::OptimConfig oc;
  std::vector<zaya::train::ParamGroup> groups;
  if (optimizer == "adamw") {
    zaya::train::ParamGroup g{};
    g.kind = zaya::train::OptimKind::AdamW;
    g.lr_scale = 1;
    g.weight_decay = 0;
    for (size_t i = 0; i < tm.params.size(); i++) g.params.push_back(i);
    groups.push_back(g);
  } else {
    groups = zaya::train::zaya_param_groups(tm.params, oc);
  }
  zaya::train::Optimizer optim(tm.params, groups, oc);
  // The state as the trainer saves it: whole parameters, then optimizer state (non-zero, like a trained one).
  std::vector<zaya::ckpt::TensorEntry> tensors;
  for (const auto& p : tm.params)
    tensors.push_back({p.name, zaya::Tensor::view(zaya::DType::F32, p.shape, p.value, nullptr), {}, 0});
  uint32_t x = 12345;
  for (auto& sl : optim.state_slices()) {
    if (sl.data.dtype == zaya::DType::F32)
      for (int64_t i = 0; i < sl.data.numel(); i++) {
        x = x * 1664525u + 1013904223u;
        sl.data.f32()[i] = float(x >> 8) * 1e-9f;
      }
    tensors.push_back({sl.name, zaya::Tensor::view(sl.data.dtype, sl.whole, sl.data.data, nullptr), {}, 0});
  }
  const size_t bytes = zaya::ckpt::AsyncSaver::layout_bytes(tensors);
  std::fprintf(stderr,
               "bench checkpoint: %.1f M parameters, state %.3f GB (weights + %s state), %d saves to %s\n",
               cfg.num_params() / 1e6, bytes / 1e9, optimizer.c_str(), saves, dir.c_str());
  zaya::ckpt::AsyncSaveOptions so;
  so.io_threads = io_threads;
  zaya::ckpt::AsyncSaver saver(so);
  const auto t_reserve = clock_type::now();
  saver.reserve(bytes);  // what the trainer does at start-up
  const double reserve_s = since(t_reserve);
  std::vector<double> stall, write, commit;
  std::string last_dir;
  bool direct = false;
  for (int k = 1; k <= saves; k++) {
    last_dir = zaya::ckpt::step_dir(dir, k);
    zaya::ckpt::remove_partial(last_dir);
    stall.push_back(saver.start(last_dir, 0, tensors));
    const std::string err = saver.wait();
    ZAYA_CHECK(err.empty(), err);
    write.push_back(saver.last_stats().write_s);
    direct = saver.last_stats().direct;
    const auto t_commit = clock_type::now();
    zaya::ckpt::commit(last_dir, k, 1, nlohmann::json::object());
    commit.push_back(since(t_commit));
    std::fprintf(stderr, "  save %d: stall %.3f s, background write %.2f s (%.2f GB/s), commit %.3f s\n", k,
                 stall.back(), write.back(), bytes / 1e9 / write.back(), commit.back());
    if (k > 1 && !keep) zaya::ckpt::remove_partial(zaya::ckpt::step_dir(dir, k - 1));
  }
  // Load from a cold cache: drop the data file's cached pages first (O_DIRECT writes leave none anyway).
  for (const auto& e : fs::directory_iterator(last_dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  const auto t_load = clock_type::now();
  double open_s = 0;
  {
    zaya::ckpt::Checkpoint ck = zaya::ckpt::Checkpoint::open(last_dir);
    open_s = since(t_load);
    for (auto& p : tm.params) ck.assemble(p.name, zaya::DType::F32, p.shape, p.value);
    optim.load_state_slices(
        [&](const zaya::train::Optimizer::StateSlice& sl) {
          ck.assemble_range(sl.name, sl.data.dtype, sl.whole, sl.begin, sl.data.numel(), sl.data.data);
        },
        last_dir);
  }
  const double load_s = since(t_load);
  std::fprintf(stderr, "  load: %.2f s (%.2f GB/s) = read + verify %.2f s + assemble into the model %.2f s\n",
               load_s, bytes / 1e9 / load_s, open_s, load_s - open_s);
  if (!keep) zaya::ckpt::remove_partial(last_dir);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  nlohmann::json j = {{"bench", "checkpoint"},
                      {"cpu", zaya::cpu_summary()},
                      {"omp_wait", zaya::omp_wait_summary()},
                      {"params_m", cfg.num_params() / 1e6},
                      {"state_bytes", bytes},
                      {"saves", saves},
                      {"stall_s", stall},
                      {"stall_s_median", median(stall)},
                      {"stall_s_max", *std::max_element(stall.begin(), stall.end())},
                      {"staging_reserve_s", reserve_s},
                      {"write_s", write},
                      {"write_gbps_median", bytes / 1e9 / median(write)},
                      {"commit_s_median", median(commit)},
                      {"o_direct", direct},
                      {"io_threads", io_threads},
                      {"load_s", load_s},
                      {"load_read_verify_s", open_s},
                      {"load_gbps", bytes / 1e9 / load_s},
                      {"checkpoint_dir", keep ? last_dir : ""}};
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
  zaya::app::LoadFlags f_sem, t_sem;
  zaya::app::add_load_flags(*fwd, f_sem);
  bool invariant = false;
  fwd->add_flag("--batch-invariant", invariant,
                "gemm()'s batch-invariant mode (row results independent of the batch; kernels/gemm.h)");
  auto* dec = app.add_subcommand(
      "decode",
      "decode steps of B sequences against the machine's memory bandwidth (weights read per step, GB/s, "
      "fraction of the measured read bandwidth), any weight format");
  zaya::app::BenchDecodeOptions d_opt;
  zaya::app::add_bench_decode_options(*dec, d_opt);
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
  zaya::app::add_load_flags(*trn, t_sem, /*with_no_mmap=*/false);
  trn->add_option("--optimizer", t_optim,
                  "adamw (every parameter, like the PyTorch baseline) or zaya (Muon split)")
      ->check(CLI::IsMember({"adamw", "zaya"}));
  std::string t_ns_dtype = "bf16";
  trn->add_option("--ns-dtype", t_ns_dtype, "Muon's Newton-Schulz operands (optim.muon.ns_dtype)")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  bool t_recompute = false;
  trn->add_flag("--recompute", t_recompute,
                "activation recomputation: keep each block's input only, re-run the block in the backward");
  auto* ckp = app.add_subcommand(
      "checkpoint",
      "asynchronous checkpoint saves and a verified load of a model's weights + optimizer state");
  std::string c_config, c_dir, c_optim = "adamw";
  int64_t c_layers = 0;
  int c_saves = 3, c_io = 4;
  bool c_keep = false;
  ckp->add_option("--config", c_config, "model config.json (random initialisation)")->required();
  ckp->add_option("--layers", c_layers, "override num_hidden_layers (size the state)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  ckp->add_option("--dir", c_dir, "directory on the disk under test (step_* directories are written there)")
      ->required();
  ckp->add_option("--saves", c_saves, "saves (each timed)")->check(CLI::PositiveNumber);
  ckp->add_option("--io-threads", c_io, "write streams")->check(CLI::PositiveNumber);
  ckp->add_option("--optimizer", c_optim, "adamw (2 moments for every parameter) or zaya (Muon split)")
      ->check(CLI::IsMember({"adamw", "zaya"}));
  ckp->add_flag("--keep", c_keep, "keep the last checkpoint (its path is in the JSON)");
  auto* srv = app.add_subcommand(
      "serve",
      "serving speed as a client sees it (TTFT, TPOT, ITL, tokens/s at several concurrencies), like vllm "
      "bench serve: against --url, or a server started in this process");
  zaya::app::BenchServeOptions s_opt;
  zaya::app::add_bench_serve_options(*srv, s_opt);
  auto* evl = app.add_subcommand(
      "eval",
      "loglikelihood scoring of HellaSwag-shaped items: one pass over each shared context against every "
      "choice as its own sequence (lm-eval's way), same results");
  zaya::app::BenchEvalOptions e_opt;
  zaya::app::add_bench_eval_options(*evl, e_opt);
  ZAYA_PARSE(app, argc, argv);
  if (srv->parsed()) return zaya::app::bench_serve(s_opt);
  if (evl->parsed()) return zaya::app::bench_eval(e_opt);
  if (invariant) zaya::set_gemm_batch_invariant(true);
  if (dec->parsed()) return zaya::app::bench_decode(d_opt);
  if (ckp->parsed()) return bench_checkpoint(c_config, c_layers, c_dir, c_saves, c_io, c_optim, c_keep);
  if (trn->parsed()) {
    ZAYA_CHECK(!t_model.empty() || !t_config.empty(), "zaya bench train needs --model DIR or --config FILE");
    ZAYA_CHECK(tB > 0 && tS > 0 && t_steps > 0, "--batch, --seq and --steps must be positive");
    return bench_train(t_model, t_config, tB, tS, t_dtype, t_steps, seed, t_optim, t_recompute, t_sem.get(),
                       t_ns_dtype);
  }
  if (fwd->parsed()) {
    ZAYA_CHECK(!model_dir.empty() || !config.empty(),
               "zaya bench forward needs --model DIR or --config FILE");
    ZAYA_CHECK(B > 0 && S > 0 && repeats > 0, "--batch, --seq and --repeats must be positive");
    return bench_forward(model_dir, config, B, S, dtype, repeats, seed, f_sem.get(), f_sem.no_mmap);
  }
  return 2;
}

zaya::app::Register reg("bench",
                        "benchmarks (forward, decode, train, checkpoint, serve, eval): tokens/s, GFLOP/s, "
                        "MFU vs measured GEMM peak",
                        cmd_bench);

}  // namespace
