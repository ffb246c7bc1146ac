// The `zaya` binary as users run it: real processes, real files. The parity contract of `zaya forward`
// (output tensor names, shapes, dtypes) and of `zaya generate --json`, plus clear errors for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "io/safetensors.h"
#include "test_util.h"

namespace {

struct Proc {
  int status;
  std::string out;  // stdout and stderr together
};

Proc run(const std::string& args) {
  std::string cmd = std::string(ZAYA_BINARY) + " " + args + " 2>&1";
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

TEST(Cli, GenerateJsonEqualsGolden) {
  const std::string g = zaya::test::golden_dir();
  Proc r = run("generate --model " + g + " --input " + g + "/inputs.json --max-new-tokens 16 --greedy --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto want = zaya::test::read_json(g + "/expected.json")["generation"]["new_tokens"];
  auto line_start = r.out.find("{\"new_tokens\"");
  ASSERT_NE(line_start, std::string::npos) << r.out;
  auto got = nlohmann::json::parse(r.out.substr(line_start, r.out.find('\n', line_start) - line_start));
  EXPECT_EQ(got["new_tokens"], want);
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
