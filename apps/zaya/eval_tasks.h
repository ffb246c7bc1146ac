// zaya eval run / zaya eval table: lm-evaluation-harness-compatible tasks (src/eval/tasks.h) scored with a
// model, results in lm-eval's layout, and a comparison table of result files. See docs/eval.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/zaya.h"

namespace zaya::app {

struct EvalRunOptions {
  std::string model_dir;             // HF checkpoint directory (float or quantized)
  std::string tokenizer;             // tokenizer.json; "" = MODEL/tokenizer.json
  std::vector<std::string> tasks;    // registered names or generic-schema folders of data_dir
  std::string data_dir;              // DATA_DIR/TASK/SPLIT.jsonl
  int num_fewshot = -1;              // -1: each task's default
  int64_t limit = 0;                 // > 0: the first N items of each task
  int64_t context = 0;               // model context in tokens; 0 = min(max_position_embeddings, 2048)
  int64_t batch_tokens = 2048;       // tokens per forward
  bool share_context = true;         // run a question's context once for all its choices
  uint64_t seed = 1234;              // lm-eval's fewshot_random_seed
  int64_t bootstrap_iters = 100000;  // lm-eval's --bootstrap_iters (perplexity stderr)
  int64_t max_gen_tokens = 256;      // generative tasks: lm-eval's max_gen_toks default
  std::string output;                // results JSON; "" = stdout only
  std::string log_samples;           // per-request JSONL (lm-eval's --log_samples); "" = none
  std::string dtype = "fp32";        // GEMM compute dtype of the float matrices
  Semantics semantics = Semantics::Auto;
  bool in_memory = false;  // --no-mmap
};

int eval_run(const EvalRunOptions& o);
int eval_table(const std::vector<std::string>& files);

}  // namespace zaya::app
