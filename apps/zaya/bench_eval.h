// zaya bench eval: loglikelihood scoring speed on HellaSwag-shaped items (a context and several
// continuations), one pass over each shared context against every choice as its own sequence (lm-eval's
// way), in apps/zaya/cmd_bench_eval.cpp; cmd_bench.cpp registers it as the `eval` subcommand of `zaya bench`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "load_flags.h"

namespace zaya::app {

struct BenchEvalOptions {
  std::string model_dir, config;
  int64_t items = 32;         // questions
  int64_t context = 100;      // context tokens per question (BOS included)
  int64_t continuation = 20;  // tokens per choice
  int64_t choices = 4;
  int64_t batch_tokens = 2048;
  std::string dtype = "fp32";
  int repeats = 3;
  std::string way = "both";  // both | shared | separate (one way only: for ZAYA_PROFILE=1)
  uint64_t seed = 0;
  LoadFlags semantics;
};

void add_bench_eval_options(CLI::App& sub, BenchEvalOptions& o);
int bench_eval(const BenchEvalOptions& o);

}  // namespace zaya::app
