// zaya bench decode: how close a decode step comes to the machine's memory bandwidth.
//
// A decode step reads every weight its tokens touch: the attention and router matrices of every layer, the
// experts the batch's tokens chose in each layer (top-1 of E: ~E·(1-(1-1/E)^B) distinct experts for B
// tokens), the head, and the embedding rows. The bench counts those bytes per step from the model as loaded
// (quantized elements plus their scales) and from the routing the step actually did, times the steps, and
// reports the achieved GB/s beside the read bandwidth of this machine measured in the same run (a threaded
// streaming read of 1 GiB), with the fraction. One JSON line per batch size. ZAYA_PROFILE=1 adds the
// per-stage times (stderr) to see whether the weights or the glue set the pace.
//
// Weights: --model loads a checkpoint (float or quantized); --config initialises random weights. --weights
// q8_0 | mxfp4 | fp8 quantizes the float weights in memory (--what experts | all; as `zaya quantize`);
// fp32 / bf16 choose the float dtype. The compute dtype of the float matrices is fp32 for --weights fp32,
// bf16 otherwise.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "bench_decode.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/mem_bandwidth.h"
#include "core/profile.h"
#include "core/quant.h"
#include "core/threads.h"
#include "kernels/cca.h"
#include "kernels/gemm.h"
#include "model/zaya-init.h"
#include "model/zaya-weights.h"
#include "model/zaya.h"

namespace zaya::app {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double tensor_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  return double(t.nbytes()) + (t.scales ? double(t.scales->nbytes()) : 0.0);
}

// Quantizes the model's matrices in memory as `zaya quantize --what` would (experts only, or every matrix
// whose input dim fits the format's blocks), then fuses qkv again.
void quantize_in_memory(ZayaModel& m, DType fmt, const std::string& what) {
  for (const NamedParam& p : named_params(m.cfg, m.w)) {
    if (!p.is_matrix || !p.slot->defined()) continue;
    if (what != "all" && p.name.find(".experts.") == std::string::npos) continue;
    if (fmt != DType::F8_E4M3 && p.shape.back() % kQuantBlock != 0) continue;
    *p.slot = quantize(*p.slot, fmt);
  }
  if (m.cfg.tie_word_embeddings) m.w.lm_head = m.w.embed;
  fuse_qkv(m.cfg, m.w);
  pack_decode_weights(m.w);
}

// Bytes a decode step of B tokens reads besides the experts: every layer's non-expert tensors (attention,
// convolutions, router, norms, scales), the head, the final norm and B embedding rows.
struct StepBytes {
  double fixed = 0;
  std::vector<double> expert;  // [L] bytes of one expert (gate_up + down) per layer
  double embed_row = 0;
  // Outside batch-invariant mode decode reads the convolution's inference pack (bf16 where exact) in place of
  // the fp32 conv1_w counted in `fixed`: the bytes fewer.
  double conv_pack_saving = 0;
};

StepBytes step_bytes(ZayaModel& m) {
  StepBytes b;
  const ZayaConfig& c = m.cfg;
  for (const NamedParam& p : named_params(c, m.w)) {
    if (p.name.find(".experts.") != std::string::npos) continue;
    if (p.name == "model.embed_tokens.weight" && !c.tie_word_embeddings) continue;  // rows only, below
    b.fixed += tensor_bytes(*p.slot);
  }
  for (const ZayaLayerWeights& l : m.w.layers)
    b.expert.push_back((tensor_bytes(l.experts_gate_up) + tensor_bytes(l.experts_down)) /
                       double(c.num_experts));
  b.embed_row = tensor_bytes(m.w.embed) / double(c.vocab_size);
  for (const ZayaLayerWeights& l : m.w.layers)
    if (l.conv1_pack) b.conv_pack_saving += tensor_bytes(l.conv1_w) - double(l.conv1_pack->bytes());
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<int64_t> parse_batches(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string part = s.substr(pos, comma - pos);
    ZAYA_CHECK(
        !part.empty() && part.find_first_not_of("0123456789") == std::string::npos && std::stoll(part) > 0,
        "--batch must be positive integers separated by commas, got '", s, "'");
    out.push_back(std::stoll(part));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

void add_bench_decode_options(CLI::App& sub, BenchDecodeOptions& o) {
  auto* m = sub.add_option("--model", o.model_dir, "HF checkpoint directory (float or quantized)");
  sub.add_option("--config", o.config, "model config.json (random initialisation)")->excludes(m);
  sub.add_option("--weights", o.weights,
                 "fp32 | bf16 | q8_0 | mxfp4 | fp8 (quantized in memory from the float weights); default: as "
                 "loaded (bf16 compute), fp32 for --config")
      ->check(CLI::IsMember({"fp32", "bf16", "q8_0", "mxfp4", "fp8"}));
  sub.add_option("--what", o.what, "with a quantized --weights: experts (default) | all")
      ->check(CLI::IsMember({"experts", "all"}));
  sub.add_option("--batch,--batches", o.batches,
                 "sequences decoding together; a comma list gives one line each");
  sub.add_option("--context,--prefill", o.context,
                 "prompt tokens per sequence before decoding (timed as prefill)");
  sub.add_option("--tokens,--steps", o.tokens, "timed decode steps per run");
  sub.add_option("--repeats", o.repeats, "timed runs after one warm-up (median reported)");
  sub.add_option("--seed", o.seed, "weights/tokens seed");
  sub.add_flag("--batch-invariant", o.batch_invariant, "gemm()'s batch-invariant mode on (kernels/gemm.h)");
  sub.add_flag(
      "--compare-invariant", o.compare_invariant,
      "run every repetition with the batch-invariant mode off and on, interleaved; report the ratio");
  add_load_flags(sub, o.semantics);
}

int bench_decode(const BenchDecodeOptions& o) {
  ZAYA_CHECK(!o.model_dir.empty() || !o.config.empty(),
             "zaya bench decode needs --model DIR or --config FILE");
  ZAYA_CHECK(o.context > 0 && o.tokens > 0 && o.repeats > 0,
             "--context, --tokens and --repeats must be positive");
  const std::vector<int64_t> batches = parse_batches(o.batches);
  std::string weights = o.weights.empty() ? (o.model_dir.empty() ? "fp32" : "") : o.weights;
  const DType compute = weights == "fp32" ? DType::F32 : DType::BF16;
  DType qfmt = DType::F32;
  const bool quantize_now = quant_scheme_from_name(weights, &qfmt);

  // The roof this run is compared with: a 1 GiB streaming read, measured before the model loads and again
  // after every timed repetition (the machine's bandwidth moves while the run goes on); each repetition's
  // achieved GB/s is divided by the measurement beside it. The probe's buffer stays resident all run.
  std::fprintf(stderr, "bench decode: measuring the read bandwidth (1 GiB, %d threads)\n", num_threads());
  const ReadBandwidthProbe probe;
  const double read_gbs = probe.measure(5);

  const auto t_load = Clock::now();
  ZayaModel model;
  if (!o.model_dir.empty()) {
    LoadOptions lo;
    lo.compute = compute;
    o.semantics.apply(lo);
    model = ZayaModel::load(o.model_dir, lo);
  } else {
    model.cfg = load_config(o.config);
    apply_semantics(model.cfg, o.semantics.get(), o.config);
    model.w = init_weights(model.cfg, compute, o.seed);
  }
  if (quantize_now) quantize_in_memory(model, qfmt, o.what);
  const double load_s = seconds_since(t_load);
  const ZayaConfig& c = model.cfg;
  const StepBytes sb = step_bytes(model);
  const DType expert_dtype = model.w.layers[0].experts_gate_up.dtype;
  if (weights.empty())
    weights = is_quantized(expert_dtype) ? quant_scheme_name(expert_dtype) : dtype_name(expert_dtype);
  std::fprintf(stderr, "bench decode: %s, experts %s, load %.2f s, read bandwidth %.1f GB/s\n",
               o.model_dir.empty() ? o.config.c_str() : o.model_dir.c_str(), dtype_name(expert_dtype), load_s,
               read_gbs);

  const bool saved = gemm_batch_invariant();
  if (o.batch_invariant) set_gemm_batch_invariant(true);
  const std::vector<bool> modes =
      o.compare_invariant ? std::vector<bool>{false, true} : std::vector<bool>{gemm_batch_invariant()};
  std::mt19937 rng(uint32_t(o.seed) + 1);
  auto token = [&] { return int32_t(3 + rng() % uint32_t(c.vocab_size - 3)); };
  ForwardScratch sc;
  ForwardResult res;
  ForwardOptions opt;
  opt.all_logits = false;
  ForwardOptions dec_opt = opt;
  dec_opt.tap_router = true;  // the experts each step read
  const int64_t L = c.num_hidden_layers, E = c.num_experts;

  for (const int64_t B : batches) {
    // Per mode: step seconds and prefill seconds per repetition, and the bytes the timed steps read.
    std::vector<std::vector<double>> step_s(modes.size()), prefill_s(modes.size());
    double bytes_sum = 0, experts_sum = 0;
    int64_t bytes_steps = 0;
    std::vector<double> bandwidth_gbs, fraction;  // per timed repetition
    for (int r = 0; r <= o.repeats; r++) {        // r == 0 is the warm-up
      for (size_t k = 0; k < modes.size(); k++) {
        const size_t mi = (r % 2 == 1 && modes.size() == 2) ? 1 - k : k;
        set_gemm_batch_invariant(modes[mi]);
        ZayaCache cache(c, B);
        // The whole sequence's K/V at once, as the server's slots and `zaya generate` allocate it: a cache
        // that grows on the first decode step copies its keys and faults in fresh pages (+70-110 ms on that
        // step after a 512-token prompt of ZAYA1-8B on the Zen 5 VM).
        cache.reserve(c, o.context + o.tokens);
        std::vector<int32_t> ids(size_t(B * o.context));
        for (auto& id : ids) id = token();
        profile_pause(true);  // ZAYA_PROFILE reports the timed decode steps only
        const auto t0 = Clock::now();
        zaya_forward(model, cache, ids.data(), nullptr, B, o.context, opt, res, sc);
        const double pre = seconds_since(t0);
        std::vector<int32_t> next(static_cast<size_t>(B));
        double dec = 0, rep_bytes = 0;
        for (int64_t s = 0; s < o.tokens; s++) {
          for (auto& id : next) id = token();
          profile_pause(r == 0);
          const auto ts = Clock::now();
          zaya_forward(model, cache, next.data(), nullptr, B, 1, dec_opt, res, sc);
          dec += seconds_since(ts);
          if (r > 0 && mi == 0) {
            double bytes = sb.fixed - (modes[mi] ? 0.0 : sb.conv_pack_saving) + double(B) * sb.embed_row;
            for (int64_t l = 0; l < L; l++) {
              std::set<int32_t> chosen;
              for (int64_t b = 0; b < B; b++) {
                const int32_t e = res.choice[size_t(l * B + b)];
                if (e < E) chosen.insert(e);
              }
              bytes += double(chosen.size()) * sb.expert[size_t(l)];
              experts_sum += double(chosen.size());
            }
            bytes_sum += bytes;
            rep_bytes += bytes;
            bytes_steps++;
          }
        }
        dec /= double(o.tokens);
        double gbs = 0;
        char beside[96] = "";
        if (r > 0) {
          step_s[mi].push_back(dec);
          prefill_s[mi].push_back(pre);
          if (mi == 0) {
            gbs = probe.measure(3);
            bandwidth_gbs.push_back(gbs);
            fraction.push_back(rep_bytes / double(o.tokens) / dec / 1e9 / gbs);
            std::snprintf(beside, sizeof beside, "  read bandwidth beside it %.1f GB/s, fraction %.2f", gbs,
                          fraction.back());
          }
        }
        std::fprintf(
            stderr,
            "bench decode: %s %d/%d  B=%lld  invariant=%d  prefill %.3f s  step %.2f ms  %.1f tok/s%s\n",
            r ? "run" : "warm-up", r, o.repeats, (long long)B, int(modes[mi]), pre, dec * 1e3,
            double(B) / dec, beside);
      }
    }
    const double step = median(step_s[0]);
    const double bytes = bytes_sum / double(std::max<int64_t>(bytes_steps, 1));
    nlohmann::json j;
    j["bench"] = "decode";
    j["cpu"] = cpu_summary();
    j["omp_wait"] = omp_wait_summary();
    j["threads"] = num_threads();
    j["model"] = o.model_dir.empty() ? o.config : o.model_dir;
    j["weights"] = weights;
    j["what"] = quantize_now ? o.what : "as loaded";
    j["kv_cache"] = o.semantics.kv_cache;  // how the cache stores keys and values (--kv-cache)
    j["compute"] = dtype_name(compute);
    j["batch"] = B;
    j["context"] = o.context;
    j["tokens"] = o.tokens;
    j["repeats"] = o.repeats;
    j["batch_invariant"] = bool(modes[0]);
    j["decode_tokens_per_s"] = double(B) / step;
    j["prefill_tokens_per_s"] = double(B * o.context) / median(prefill_s[0]);
    j["step_ms"] = step * 1e3;
    j["weight_bytes_per_step"] = bytes;
    j["experts_read_per_layer"] = experts_sum / double(std::max<int64_t>(bytes_steps, 1) * L);
    j["achieved_gbs"] = bytes / step / 1e9;
    // The median of the measurements taken beside the timed repetitions, and the median of each repetition's
    // achieved GB/s over its own measurement.
    j["read_bandwidth_gbs"] = median(bandwidth_gbs);
    j["read_bandwidth_before_load_gbs"] = read_gbs;
    j["bandwidth_fraction"] = median(fraction);
    j["bandwidth_fractions"] = fraction;  // each timed repetition's, in order
    j["peak_rss_mb"] = peak_rss_mb() - double(probe.bytes()) / double(1 << 20);  // less the probe's buffer
    j["load_s"] = load_s;
    if (modes.size() == 2) {
      std::vector<double> ratio;
      for (size_t i = 0; i < step_s[0].size(); i++) ratio.push_back(step_s[0][i] / step_s[1][i]);
      j["invariant_decode_tokens_per_s"] = double(B) / median(step_s[1]);
      j["decode_invariant_over_default"] = median(ratio);
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  set_gemm_batch_invariant(saved);
  return 0;
}

}  // namespace zaya::app
