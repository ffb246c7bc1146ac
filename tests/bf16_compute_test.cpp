// bf16 compute (`--dtype bf16`: GEMM weights and GEMM inputs rounded to bf16, fp32 accumulation; norms,
// softmaxes, router, CCA states and logits fp32) on the golden model (tests/data/golden/zaya1_like, the
// official implementation in fp32). The golden directory has no bf16-compute reference (logits_bf16w.bin is
// an fp32 forward of bf16-rounded weights), so bf16 compute is measured against the fp32 reference at a
// tolerance, and shown to be bf16 at all: a `--dtype bf16` that silently ran fp32 would sit within 1.3e-5 of
// the reference, below the floor each test sets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "io/model_inputs.h"
#include "io/safetensors.h"
#include "kernels/loss.h"
#include "model/generate.h"
#include "model/zaya.h"
#include "test_util.h"

using namespace zaya;
namespace fs = std::filesystem;
using test::max_abs_diff;

namespace {

struct ForwardOut {
  std::vector<float> logits;    // [B, S, V]
  float loss = NAN;             // mean CE over the targets
  std::vector<int32_t> choice;  // [L, B, S]
};

// `zaya forward --dtype <dtype>` on the golden case, read back from its safetensors output.
ForwardOut forward_cli(const std::string& dtype) {
  const fs::path dir = fs::temp_directory_path() / ("zaya_bf16_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / (dtype + ".safetensors")).string(), log = (dir / "log").string();
  const std::string g = test::golden_dir();
  EXPECT_EQ(test::run_shell(std::string(ZAYA_BINARY) + " forward --model " + g + " --input " + g +
                                "/inputs.json --dtype " + dtype + " --output " + out,
                            log),
            0)
      << test::read_text(log);
  ForwardOut r;
  {
    SafetensorsFile f = SafetensorsFile::open(out);
    Tensor l = f.tensor("logits"), loss = f.tensor("loss"), ch = f.tensor("router.choice");
    r.logits.assign(l.f32(), l.f32() + l.numel());
    r.loss = loss.f32()[0];
    r.choice.assign(ch.i32(), ch.i32() + ch.numel());
  }
  fs::remove_all(dir);
  return r;
}

// `zaya generate` reports the compute dtype on its load line ("... bf16 GEMMs").
bool contains_bf16(const std::string& log) {
  return log.find("bf16 GEMMs") != std::string::npos;
}

// The reference's routing margin of every routing decision: per layer and position [L, B*S], the gap between
// the best and the second-best score (softmax(router logits) + balancing bias, as route_top1 compares them).
std::vector<float> routing_margins(const std::string& g, const ZayaModel& m, int64_t T) {
  const int64_t L = m.cfg.num_hidden_layers, E1 = m.cfg.num_experts + 1;
  const std::vector<float> rl = test::read_f32(g + "/router_logits.bin");  // [L, B, S, E+1]
  EXPECT_EQ(int64_t(rl.size()), L * T * E1);
  std::vector<float> margin(size_t(L * T));
  for (int64_t l = 0; l < L; l++) {
    const float* bias = m.w.layers[size_t(l)].balancing_biases.f32();
    for (int64_t t = 0; t < T; t++) {
      const float* r = rl.data() + (l * T + t) * E1;
      const float mx = *std::max_element(r, r + E1);
      double sum = 0;
      for (int64_t e = 0; e < E1; e++) sum += std::exp(double(r[e] - mx));
      float best = -INFINITY, second = -INFINITY;
      for (int64_t e = 0; e < E1; e++) {
        const float score = float(std::exp(double(r[e] - mx)) / sum) + bias[e];
        if (score > best) {
          second = best;
          best = score;
        } else if (score > second) {
          second = score;
        }
      }
      margin[size_t(l * T + t)] = best - second;
    }
  }
  return margin;
}

}  // namespace

// `zaya forward --dtype bf16` on the golden case against the fp32 reference. bf16 rounding (8 significant
// bits) moves the router's inputs by ~1e-2 relative, so a routing decision whose reference margin is tiny may
// flip, and a flipped token's logits (and, through attention and the CCA convolutions, those after it in its
// row) move by O(1): measured, one flip (layer 2, row 0, position 10, reference margin 0.0063; smallest
// margin of the case 0.0014) moving that position's logits by 1.84. So: routing may differ only where the
// reference margin is below 0.02 (3x the measured flip's), at most 3 decisions (measured 1) of the 256; the
// logits of positions that no flip can reach (rows without one, and positions before a row's first flip:
// the model is causal) within 0.5 (measured 0.113 at max |logit| ~10; bf16's relative rounding of 2^-9
// through 4 blocks); the loss within 0.025 (measured 0.0062, the flip included). And it is bf16: its logits
// differ from the reference by more than 1e-3 (an fp32 forward: 1.1e-5).
TEST(Bf16Compute, ForwardLogitsNearTheFp32Reference) {
  const std::string g = test::golden_dir();
  const ModelInputs in = load_model_inputs(g + "/inputs.json");
  const nlohmann::json expected = test::read_json(g + "/expected.json");
  const std::vector<float> ref = test::read_f32(g + "/logits.bin");
  const int64_t T = in.B * in.S, V = int64_t(ref.size()) / T;
  std::vector<bool> keep(size_t(T), true);  // padded positions carry no meaning (spec §5.5g)
  for (size_t i = 0; i < in.attention_mask.size(); i++) keep[i] = in.attention_mask[i] != 0;
  const ZayaModel model = ZayaModel::load(g);
  const int64_t L = model.cfg.num_hidden_layers;
  const std::vector<float> margin = routing_margins(g, model, T);

  const ForwardOut bf = forward_cli("bf16");
  ASSERT_EQ(bf.logits.size(), ref.size());
  ASSERT_EQ(bf.choice.size(), size_t(L * T));
  // Routing: flips only at near-ties; the first flipped position of each row.
  const auto& ch = expected["router"]["choice_with_skip"];
  std::vector<int64_t> first_flip(size_t(in.B), in.S);
  int flips = 0;
  for (int64_t l = 0; l < L; l++)
    for (int64_t t = 0; t < T; t++) {
      if (!keep[size_t(t)] || bf.choice[size_t(l * T + t)] == ch[l][t / in.S][t % in.S][0].get<int>())
        continue;
      flips++;
      first_flip[size_t(t / in.S)] = std::min(first_flip[size_t(t / in.S)], t % in.S);
      std::printf("routing flip: layer %ld row %ld position %ld, reference margin %.4g\n", long(l),
                  long(t / in.S), long(t % in.S), margin[size_t(l * T + t)]);
      EXPECT_LT(margin[size_t(l * T + t)], 0.02) << "a clear routing decision changed in bf16";
    }
  EXPECT_LE(flips, 3);
  // Logits where no flip reaches.
  std::vector<bool> unaffected = keep;
  for (int64_t t = 0; t < T; t++)
    if (t % in.S >= first_flip[size_t(t / in.S)]) unaffected[size_t(t)] = false;
  const double err = max_abs_diff(bf.logits.data(), ref.data(), ref.size(), &unaffected, size_t(V));
  const double err_all = max_abs_diff(bf.logits.data(), ref.data(), ref.size(), &keep, size_t(V));
  const double err_loss = std::fabs(double(bf.loss) - expected["loss"].get<double>());
  std::printf(
      "bf16 compute vs the fp32 reference: logits max abs %.3g where no routing flip reaches (%.3g "
      "everywhere), loss %.3g, %d routing flips\n",
      err, err_all, err_loss, flips);
  EXPECT_LT(err, 0.5);
  EXPECT_GT(err, 1e-3) << "--dtype bf16 gave fp32 logits: it did not compute in bf16";
  EXPECT_LT(err_loss, 0.025);
  EXPECT_TRUE(std::isfinite(bf.loss));
}

// Cached greedy generation with bf16 compute on the golden prompts (2 rows, 16 new tokens): measured, every
// token equals the reference's (smallest greedy logit gap in the reference 0.035), so the tokens are held
// exactly, in-process and through `zaya generate --dtype bf16`. The logits that chose each token: most steps
// sit ~0.01 (relative) from the reference's, but decode steps route near-ties differently too (row 0, steps
// 6 and 13: max abs 1.0 and 1.9), so they are held as a whole, by the relative Frobenius difference over all
// 32 steps: measured 0.049 (max abs 1.89); bar 0.2 (4x); above 1e-4 (an fp32 decode: ~1e-6).
TEST(Bf16Compute, GreedyGenerationMatchesTheReference) {
  const std::string g = test::golden_dir();
  const ModelInputs in = load_model_inputs(g + "/inputs.json");
  const auto want = test::read_json(g + "/expected.json")["generation"]["new_tokens"]
                        .get<std::vector<std::vector<int32_t>>>();
  const std::vector<float> ref = test::read_f32(g + "/gen_step_logits.bin");  // [B, 16, V]
  LoadOptions lo;
  lo.compute = DType::BF16;
  const ZayaModel model = ZayaModel::load(g, lo);
  GenerateOptions go;
  go.max_new_tokens = int64_t(want[0].size());
  go.stop_at_eos = false;
  std::vector<float> step_logits;
  const auto got = generate(model, in.prompt_ids.data(), in.gen_B, in.gen_S, go, nullptr, &step_logits);
  EXPECT_EQ(got, want);
  ASSERT_EQ(step_logits.size(), ref.size());
  const double err = test::rel_frobenius_diff(step_logits.data(), ref.data(), ref.size());
  std::printf(
      "bf16 cached generation: step logits %.3g relative (Frobenius) from the reference, max abs %.3g\n", err,
      test::max_abs_diff(step_logits.data(), ref.data(), ref.size()));
  EXPECT_LT(err, 0.2);
  EXPECT_GT(err, 1e-4) << "the bf16 model generated with fp32 logits";

  const fs::path dir = fs::temp_directory_path() / ("zaya_bf16_gen_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "out.json").string(), err_log = (dir / "err.log").string();
  ASSERT_EQ(std::system((std::string(ZAYA_BINARY) + " generate --model " + g + " --input " + g +
                         "/inputs.json --dtype bf16 --greedy --ignore-eos --json > " + out + " 2> " + err_log)
                            .c_str()),
            0)
      << test::read_text(err_log);
  EXPECT_TRUE(contains_bf16(test::read_text(err_log))) << test::read_text(err_log);
  EXPECT_EQ(
      nlohmann::json::parse(test::read_text(out))["new_tokens"].get<std::vector<std::vector<int32_t>>>(),
      want);
  fs::remove_all(dir);
}
