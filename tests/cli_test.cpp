// The `zaya` binary as users run it: real processes, real files. The parity contract of `zaya forward`
// (output tensor names, shapes, dtypes) and of `zaya generate --json`, plus clear errors for bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "test_util.h"

namespace {

struct Proc {
  int status;
  std::string out;  // stdout and stderr together
};

// `env_prefix`: e.g. "env -u OMP_WAIT_POLICY", the environment the binary starts with.
Proc run(const std::string& args, const std::string& env_prefix = "") {
  std::string cmd = env_prefix + " " + std::string(ZAYA_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

}  // namespace

TEST(Cli, ForwardWritesTheParityContract) {
  const std::string g = zaya::test::golden_dir(), out = tmp("zaya_cli_forward.safetensors");
  Proc r = run("forward --model " + g + " --input " + g + "/inputs.json --output " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = zaya::SafetensorsFile::open(out);
  EXPECT_EQ(f.info("logits").shape, (zaya::Shape{2, 32, 512}));
  EXPECT_EQ(f.info("logits").dtype, zaya::DType::F32);
  EXPECT_EQ(f.info("loss").shape, zaya::Shape{});
  EXPECT_EQ(f.info("router.choice").shape, (zaya::Shape{4, 2, 32, 1}));
  EXPECT_EQ(f.info("router.choice").dtype, zaya::DType::I32);
  EXPECT_EQ(f.info("hidden_states").shape, (zaya::Shape{6, 2, 32, 128}));
  auto want = zaya::test::read_json(g + "/expected.json");
  EXPECT_NEAR(f.tensor("loss").f32()[0], want["loss"].get<double>(), 1e-5);
  std::vector<float> logits = zaya::test::read_f32(g + "/logits.bin");
  EXPECT_LT(zaya::test::max_abs_diff(f.tensor("logits").f32(), logits.data(), logits.size()), 1e-4);
  std::filesystem::remove(out);
}

// With the fp32 cache and with `--kv-cache bf16` (the golden tokens hold there too: model_golden_test).
TEST(Cli, GenerateJsonEqualsGolden) {
  const std::string g = zaya::test::golden_dir();
  for (const char* kv : {"", " --kv-cache bf16"}) {
    SCOPED_TRACE(kv);
    Proc r = run("generate --model " + g + " --input " + g +
                 "/inputs.json --max-new-tokens 16 --greedy --json" + kv);
    ASSERT_EQ(r.status, 0) << r.out;
    auto want = zaya::test::read_json(g + "/expected.json")["generation"]["new_tokens"];
    auto line_start = r.out.find("{\"new_tokens\"");
    ASSERT_NE(line_start, std::string::npos) << r.out;
    auto got = nlohmann::json::parse(r.out.substr(line_start, r.out.find('\n', line_start) - line_start));
    EXPECT_EQ(got["new_tokens"], want);
  }
  Proc r = run("generate --model " + g + " --input " + g + "/inputs.json --kv-cache fp8");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--kv-cache"), std::string::npos) << r.out;
}

TEST(Cli, BadInputGetsAClearError) {
  const std::string g = zaya::test::golden_dir();
  Proc r = run("forward --model /nonexistent --input " + g + "/inputs.json --output " + tmp("x.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("/nonexistent"), std::string::npos) << r.out;
  std::string bad = tmp("zaya_cli_bad_inputs.json");
  FILE* f = fopen(bad.c_str(), "w");
  fputs("{\"input_ids\": [[2, 3], [4]]}", f);
  fclose(f);
  r = run("forward --model " + g + " --input " + bad + " --output " + tmp("x.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(bad), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("different lengths"), std::string::npos) << r.out;
  r = run("frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown command"), std::string::npos);
}

// Legacy-layout checkpoints run with the semantics of the code they were released with (spec §8.4) by
// default, and with the native (Hugging Face) semantics under --semantics native. In both references the
// skip class is live (legacy: skips per layer [25, 8, 14, 12]), so the two semantics give logits ~2.5 apart.
TEST(Cli, LegacyCheckpointsDefaultToLegacySemantics) {
  const std::string out = tmp("zaya_cli_legacy.safetensors");
  int skips_seen = 0;
  for (const char* name : {"ref_legacy_8b", "ref_legacy_base"}) {
    SCOPED_TRACE(name);
    const std::string d = zaya::test::data_dir() + "/" + name;
    for (const std::string sem : {"", "legacy", "native"}) {
      SCOPED_TRACE("--semantics " + sem);
      const std::string suffix = sem == "native" ? "" : "_legacy";
      Proc r = run("forward --model " + d + " --input " + d + "/inputs" + suffix + ".json --output " + out +
                   (sem.empty() ? "" : " --semantics " + sem));
      ASSERT_EQ(r.status, 0) << r.out;
      auto f = zaya::SafetensorsFile::open(out);
      auto want = zaya::test::read_json(d + "/expected" + suffix + ".json");
      std::vector<float> logits = zaya::test::read_f32(d + "/logits" + suffix + ".bin");
      ASSERT_EQ(size_t(f.tensor("logits").numel()), logits.size());
      const double diff = zaya::test::max_abs_diff(f.tensor("logits").f32(), logits.data(), logits.size());
      std::printf("%s --semantics '%s': max |logit diff| %.3g\n", name, sem.c_str(), diff);
      // Measured <= 1.01e-5 against the fp32 reference (both semantics, Zen 5); the semantics differ by 2.9.
      EXPECT_LT(diff, 5e-5);
      EXPECT_NEAR(f.tensor("loss").f32()[0], want["loss"].get<double>(), 1e-5);
      // Expert choices (index E = skip) equal the reference's exactly.
      const auto& choice = want["router"]["choice_with_skip"];
      const zaya::Tensor got = f.tensor("router.choice");
      const int32_t* c = got.i32();
      size_t i = 0, skips = 0;
      for (const auto& layer : choice)
        for (const auto& row : layer)
          for (const auto& pos : row) {
            ASSERT_LT(i, size_t(got.numel()));
            EXPECT_EQ(c[i], pos[0].get<int32_t>()) << "choice " << i;
            skips += pos[0].get<int32_t>() == 8;  // E = 8 experts: index 8 is the skip class
            i++;
          }
      EXPECT_EQ(i, size_t(got.numel()));
      EXPECT_GT(skips, 0u) << "the skip class must be live for the semantics to differ";
      skips_seen += int(skips);
    }
    // Greedy generation through the cache also follows the checkpoint's own (legacy) semantics by default.
    Proc g = run("generate --model " + d + " --input " + d +
                 "/inputs_legacy.json --max-new-tokens 16 --greedy --json");
    ASSERT_EQ(g.status, 0) << g.out;
    const size_t at = g.out.find("{\"new_tokens\"");
    ASSERT_NE(at, std::string::npos) << g.out;
    auto got = nlohmann::json::parse(g.out.substr(at, g.out.find('\n', at) - at));
    EXPECT_EQ(got["new_tokens"],
              zaya::test::read_json(d + "/expected_legacy.json")["generation"]["new_tokens"]);
  }
  EXPECT_GT(skips_seen, 0);
  // A native checkpoint has no legacy code to reproduce.
  const std::string g = zaya::test::golden_dir();
  Proc r =
      run("forward --model " + g + " --input " + g + "/inputs.json --output " + out + " --semantics legacy");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("legacy semantics were requested"), std::string::npos) << r.out;
  r = run("forward --model " + g + " --input " + g + "/inputs.json --output " + out + " --semantics old");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--semantics"), std::string::npos) << r.out;
  std::filesystem::remove(out);
}

// Mistyped subcommands, options and commands get the nearest known one; `zaya launch` says where the job's
// command goes; every CLI usage error exits 2 and names the command as typed.
TEST(Cli, UsageErrorsSuggestTheNearestName) {
  struct Case {
    std::string args;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"bench frward",
       {"zaya bench: error", "'frward' is not a subcommand of zaya bench: did you mean 'forward'?"}},
      {"data prepar", {"zaya data: error", "did you mean 'prepare'?"}},
      {"train --config x.json --step 3", {"zaya train: error", "--step: did you mean --steps?"}},
      {"generate --model m --greddy", {"--greddy: did you mean --greedy?"}},
      {"launch build/zaya train --config x.json", {"the job's command goes after `--`"}},
      {"trian --config x.json", {"unknown command 'trian' (did you mean 'train'?)"}},
  };
  for (const Case& c : cases) {
    Proc r = run(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    for (const std::string& w : c.want)
      EXPECT_NE(r.out.find(w), std::string::npos) << c.args << "\n" << r.out;
  }
}

// Help names the command as typed and shows defaults; --version names the commit, build type and CPU.
TEST(Cli, HelpAndVersion) {
  Proc h = run("forward --help");
  EXPECT_EQ(h.status, 0) << h.out;
  EXPECT_NE(h.out.find("Usage: zaya forward [OPTIONS]"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("=fp32"), std::string::npos) << "the --dtype default\n" << h.out;
  h = run("bench forward --help");
  EXPECT_NE(h.out.find("zaya bench forward"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("=512"), std::string::npos) << "the --seq default\n" << h.out;
  Proc v = run("--version");
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_NE(v.out.find("zaya.cpp "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("commit "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("cpu: "), std::string::npos) << v.out;
}

// OpenMP's waiting policy (core/threads.h): PASSIVE (with a short spin on an idle machine) unless the user
// chose OMP_WAIT_POLICY or GOMP_SPINCOUNT; a choice of theirs is kept as it is. `--version` prints it.
TEST(Cli, OmpWaitPolicyDefaultsToPassiveAndKeepsTheUsersChoice) {
  Proc d = run("--version", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT");
  ASSERT_EQ(d.status, 0) << d.out;
  const bool spin = d.out.find("omp wait: PASSIVE, GOMP_SPINCOUNT=10000\n") != std::string::npos;
  const bool plain = d.out.find("omp wait: PASSIVE\n") != std::string::npos;
  EXPECT_TRUE(spin || plain) << d.out;  // which one depends on what else this machine runs now
  Proc a = run("--version", "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=ACTIVE");
  EXPECT_NE(a.out.find("omp wait: ACTIVE\n"), std::string::npos) << a.out;
  Proc s = run("--version", "env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=0");
  EXPECT_NE(s.out.find("omp wait: GOMP_SPINCOUNT=0\n"), std::string::npos) << s.out;
  // More threads than any machine's CPUs (a count past int's range too): no spin, no overflow; a count that
  // is no number reads as "the CPUs".
  Proc h =
      run("--version", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_NUM_THREADS=99999999999999999999999");
  EXPECT_EQ(h.status, 0) << h.out;
  EXPECT_NE(h.out.find("omp wait: PASSIVE\n"), std::string::npos) << h.out;
  Proc x = run("--version", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_NUM_THREADS=abc");
  EXPECT_EQ(x.status, 0) << x.out;
  EXPECT_NE(x.out.find("omp wait: PASSIVE"), std::string::npos) << x.out;
}

// --model may name the checkpoint's config.json: the directory is meant.
TEST(Cli, ModelMayNameTheConfigFile) {
  const std::string g = zaya::test::golden_dir(), out = tmp("zaya_cli_config_model.safetensors");
  Proc r = run("forward --model " + g + "/config.json --input " + g + "/inputs.json --output " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = zaya::SafetensorsFile::open(out);
  std::vector<float> logits = zaya::test::read_f32(g + "/logits.bin");
  EXPECT_LT(zaya::test::max_abs_diff(f.tensor("logits").f32(), logits.data(), logits.size()), 1e-4);
  std::filesystem::remove(out);
}

// A checkpoint argument that is not one checkpoint is named before anything is built, with what it is.
TEST(Cli, CheckpointArgumentsSayWhatTheyAre) {
  const std::string g = zaya::test::golden_dir();
  const std::filesystem::path root = tmp("zaya_cli_ckpt_root");
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "step_00000004");
  std::filesystem::create_directories(root / "step_00000008");
  const std::string train = "train --config " + g + "/no-such-train.json --resume ";
  struct Case {
    std::string args, want;
  };
  const std::vector<Case> cases = {
      {train + "yes", "--resume (auto or a step directory) 'yes' does not exist"},
      {train + g, "is a Hugging Face model directory, not a training checkpoint"},
      {train + root.string(), "is a checkpoints root, not one checkpoint: pass a step directory (" +
                                  (root / "step_00000008").string() + " is the newest) or --resume auto"},
      {"export --out " + tmp("zaya_cli_x") + " --checkpoint " + g, "is a Hugging Face model directory"},
      {"export --out " + tmp("zaya_cli_x") + " --checkpoint " + root.string(), "is a checkpoints root"},
      {"export --out " + tmp("zaya_cli_x") + " --checkpoint " + (root / "step_00000004").string(),
       "not a training checkpoint (an empty directory)"},
  };
  for (const Case& c : cases) {
    Proc r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.args << "\n" << r.out;
  }
  std::filesystem::remove_all(root);
}

// `zaya init` refuses a non-empty --out (nothing changes) unless --overwrite, which removes the previous
// checkpoint's files first: no stale tokenizer.json stays beside the new model.
TEST(Cli, InitRefusesANonEmptyOutAndLeavesNoStaleTokenizer) {
  namespace fs = std::filesystem;
  const std::string g = zaya::test::golden_dir(), out = tmp("zaya_cli_init_" + std::to_string(getpid()));
  fs::remove_all(out);
  const std::string tok = out + "_tokenizer.json";
  FILE* f = fopen(tok.c_str(), "w");
  fputs("{\"stands for\": \"a tokenizer of another vocabulary\"}", f);
  fclose(f);
  const std::string init = "init --config " + g + "/config.json --dtype fp32 --out " + out;
  Proc r = run(init + " --tokenizer " + tok);
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(fs::exists(out + "/tokenizer.json"));
  const std::string weights = zaya::test::read_text(out + "/model.safetensors");

  r = run(init + " --seed 1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--out " + out +
                       ": the directory is not empty (config.json, model.safetensors, "
                       "tokenizer.json)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--overwrite"), std::string::npos) << r.out;
  EXPECT_EQ(zaya::test::read_text(out + "/model.safetensors"), weights);

  r = run(init + " --seed 1 --overwrite");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("removed config.json, model.safetensors, tokenizer.json"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out + "/tokenizer.json")) << "the previous model's tokenizer must not stay";
  EXPECT_NE(zaya::test::read_text(out + "/model.safetensors"), weights) << "seed 1 is another model";
  fs::remove_all(out);
  fs::remove(tok);
}

// `zaya bench serve` with its in-process server on the golden tiny model: one JSON line per concurrency (and
// per GEMM mode of the reruns), every request complete with exactly --output-len tokens, then the bars.
// Shapes and counts only: no timing is asserted.
TEST(Cli, BenchServeWritesOneLinePerConcurrencyAndTheBars) {
  const std::string g = zaya::test::golden_dir(),
                    out = tmp("zaya_cli_bench_serve_" + std::to_string(getpid()));
  std::filesystem::remove(out + ".jsonl");
  Proc r = run("bench serve --config " + g +
               "/config.json --dtype fp32 --concurrency 1,2 --num-prompts 3 --output-len 4 --input-len-min 8 "
               "--input-len-max 16 --out " +
               out + ".jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<nlohmann::json> lines;
  {
    std::ifstream f(out + ".jsonl");
    std::string line;
    while (std::getline(f, line)) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 4u) << r.out;  // c1, c1 with the other GEMM mode, c2, the bars
  const std::vector<std::pair<int, bool>> want = {{1, true}, {1, false}, {2, true}};
  for (size_t i = 0; i < want.size(); i++) {
    const auto& j = lines[i];
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j["bench"], "serve");
    EXPECT_EQ(j["concurrency"], want[i].first);
    EXPECT_EQ(j["batch_invariant"], want[i].second);
    EXPECT_EQ(j["dtype"], "fp32");
    EXPECT_EQ(j["num_prompts"], 3);
    EXPECT_EQ(j["completed"], 3);
    EXPECT_EQ(j["failed"], 0);
    EXPECT_EQ(j["output_tokens"], 12);
    EXPECT_GE(j["input_tokens"].get<int>(), 3 * 8);
    EXPECT_LE(j["input_tokens"].get<int>(), 3 * 16);
    // The synthetic tokenizer's words count the tokens of events that hold several.
    EXPECT_EQ(j["streamed_tokens"], 12);
    EXPECT_LE(j["token_events"].get<int>(), 12);
    EXPECT_GE(j["token_events"].get<int>(), 3);
    for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
      for (const char* q : {"mean", "p50", "p99"}) EXPECT_GE(j[k][q].get<double>(), 0) << k << " " << q;
    EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(j["requests_per_s"].get<double>(), 0);
    EXPECT_EQ(j["server"]["prefill_tokens"], j["input_tokens"]);
    EXPECT_EQ(j["server"]["prefill_steps"].get<int>() + j["server"]["decode_steps"].get<int>(),
              j["server"]["steps"].get<int>());
  }
  const auto& bars = lines[3];
  SCOPED_TRACE(bars.dump());
  EXPECT_EQ(bars["bench"], "serve_bars");
  EXPECT_GT(bars["c1_decode_vs_generate"]["value"].get<double>(), 0);
  EXPECT_GT(bars["c1_prefill_vs_bench_forward"]["value"].get<double>(), 0);
  EXPECT_TRUE(bars["batch_invariance_cost"].contains("c1_paired"));
  EXPECT_FALSE(bars.contains("c8_over_c1_output_tokens_per_s"));  // no concurrency 8 in this run
  std::filesystem::remove(out + ".jsonl");
}

// `zaya bench decode` as the README runs it, on a quantized checkpoint loaded with --no-mmap: one JSON line
// per batch size, the bytes a step reads, and the read bandwidth measured beside the repetitions (finite,
// positive) with the fraction being the achieved GB/s over it.
// bench forward / train print one JSON line with the step's figures: the median repetition's and the
// fastest's, each against the measured peak (mfu and mfu_best, the same statistic as the peak's best call).
TEST(Cli, BenchForwardAndTrainReportMedianAndBestFractions) {
  const std::string cfg = zaya::test::golden_dir() + "/config.json";
  for (const char* what : {"forward --repeats 3", "train --steps 3"}) {
    SCOPED_TRACE(what);
    Proc r = run(std::string("bench ") + what + " --config " + cfg + " --batch 1 --seq 8 --dtype bf16");
    ASSERT_EQ(r.status, 0) << r.out;
    const size_t at = r.out.rfind("\n{");
    ASSERT_NE(at, std::string::npos) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(at + 1));
    for (const char* k :
         {"tokens_per_s", "seconds_median", "seconds_best", "mfu", "mfu_best", "peak_gflops_bf16"}) {
      ASSERT_TRUE(j.contains(k)) << k;
      const double v = j[k].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " = " << v;
    }
    EXPECT_LE(j["seconds_best"].get<double>(), j["seconds_median"].get<double>());
    EXPECT_GE(j["mfu_best"].get<double>(), j["mfu"].get<double>());
    // tokens/s is the median's: batch x seq over it.
    EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["seconds_median"].get<double>(), 8.0, 1e-9);
  }
}

TEST(Cli, BenchDecodeWritesOneLinePerBatch) {
  const std::string q = zaya::test::data_dir() + "/quant/fp8_experts";
  Proc r = run("bench decode --model " + q +
               " --no-mmap --kv-cache bf16 --batch 1,2 --context 4 --tokens 2 --repeats 2");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (size_t i = 0; i < lines.size(); i++) {
    const auto& j = lines[i];
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j["bench"], "decode");
    EXPECT_EQ(j["batch"], int(i) + 1);
    EXPECT_EQ(j["weights"], "fp8");
    EXPECT_EQ(j["kv_cache"], "bf16");
    for (const char* k :
         {"decode_tokens_per_s", "weight_bytes_per_step", "achieved_gbs", "read_bandwidth_gbs",
          "read_bandwidth_before_load_gbs", "bandwidth_fraction", "peak_rss_mb"}) {
      ASSERT_TRUE(j.contains(k)) << k;
      const double v = j[k].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " = " << v;
    }
    // Each repetition's fraction is its own achieved GB/s over the reading beside it; the reported one is
    // their median (bench decode's: the upper one of an even count). (Comparing it with the ratio of the
    // medians is no test: on a machine whose bandwidth readings jump between runs the two differ freely.)
    ASSERT_TRUE(j.contains("bandwidth_fractions"));
    std::vector<double> f = j["bandwidth_fractions"].get<std::vector<double>>();
    ASSERT_EQ(f.size(), 2u);
    for (double x : f) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
    std::sort(f.begin(), f.end());
    EXPECT_EQ(j["bandwidth_fraction"].get<double>(), f[1]);
  }
}
