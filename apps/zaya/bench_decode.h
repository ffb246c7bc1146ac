// zaya bench decode: decode speed against the memory-bandwidth limit, in apps/zaya/cmd_bench_decode.cpp;
// cmd_bench.cpp registers it as the `decode` subcommand of `zaya bench`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "load_flags.h"

namespace zaya::app {

struct BenchDecodeOptions {
  std::string model_dir, config;
  std::string weights;  // fp32 | bf16 | q8_0 | mxfp4 | fp8; empty: as loaded (--model) or fp32 (--config)
  std::string what = "experts";  // experts | all: which matrices --weights quantizes
  std::string batches = "1";     // comma-separated batch sizes, one JSON line each
  int64_t context = 16, tokens = 8;
  int repeats = 5;
  uint64_t seed = 0;
  bool batch_invariant = false, compare_invariant = false;
  LoadFlags semantics;
};

void add_bench_decode_options(CLI::App& sub, BenchDecodeOptions& o);
int bench_decode(const BenchDecodeOptions& o);

}  // namespace zaya::app
