// zaya bench serve: a load generator for OpenAI-compatible servers (like `vllm bench serve`), in
// apps/zaya/cmd_bench_serve.cpp; cmd_bench.cpp registers it as the `serve` subcommand of `zaya bench`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "load_flags.h"

namespace zaya::app {

struct BenchServeOptions {
  std::string url;  // a running server; empty: start one in this process
  std::string model_dir, config, tokenizer, dtype = "bf16";
  std::string served_model_name;  // --url: default the first id of /v1/models
  std::string api_key;
  LoadFlags semantics;
  int64_t parallel = 0;  // 0: the largest concurrency
  int64_t batch_tokens = 512, ctx_size = 0;
  std::string batch_invariant = "on";  // on | off
  bool no_cache_prompt = false;
  bool compare_invariant = true;  // rerun concurrency 1 and 8 with the other GEMM mode (in-process only)
  bool references = true;         // the zaya generate / bench forward equivalents (in-process only)
  std::string concurrency = "1,4,8,16";
  int64_t num_prompts = 0;  // per concurrency; 0: max(8, 2 x concurrency)
  int64_t input_len_min = 128, input_len_max = 512, output_len = 128;
  int64_t vocab_size = 0;  // --url: the token-id range of the synthetic prompts (0: the model's, else 32000)
  std::string endpoint = "completions";  // completions | chat
  double temperature = 0;
  bool logprobs = false;  // ask for the chosen tokens' log-probabilities (exact token counts per event)
  uint64_t seed = 0;
  std::string out, plot;
};

void add_bench_serve_options(CLI::App& sub, BenchServeOptions& o);
int bench_serve(const BenchServeOptions& o);

}  // namespace zaya::app
