// TRAIN.json of `zaya train`: the model, the data, the optimizer, the batch, the run length, evaluation,
// logging and the final sample. Every field is documented in docs/train-config.md with an example.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/zaya-config.h"
#include "train/optim_config.h"

namespace zaya::train {

struct TrainConfig {
  std::string source;  // the file, for messages

  // Model: a config.json to initialise from scratch, or an HF checkpoint directory to continue from.
  std::string model_config;  // "model.config"
  std::string init_from;     // "model.init_from"
  uint64_t init_seed = 0;    // "model.seed"
  ZayaConfig model;          // resolved; "model.semantics" (auto | native | legacy, spec §8.4) applied

  // Data: prepared .bin/.idx prefixes (zaya data prepare).
  std::string train_data, val_data;  // "data.train", "data.val" (val optional)
  uint64_t data_seed = 1;            // "data.seed"
  std::string tokenizer;             // "tokenizer": tokenizer.json for samples and the saved checkpoint

  OptimConfig optim;  // "optim" (train/optim_config.h)

  int64_t micro_batch = 8;   // "batch.micro_batch": rows per forward/backward
  int64_t seq_len = 128;     // "batch.seq_len"
  int64_t grad_accum = 1;    // "batch.grad_accum": micro-batches per optimizer step
  int64_t steps = 100;       // "steps"
  double max_minutes = 0;    // "max_minutes": stop after this wall time (0 = no limit)
  DType dtype = DType::F32;  // "dtype": "fp32" | "bf16" (bf16 GEMMs, fp32 master weights and states)
  bool recompute = false;    // "recompute": activation recomputation (ForwardOptions::recompute)

  int64_t eval_every = 50;   // "eval.every" (0 = only at the end)
  int64_t eval_batches = 8;  // "eval.batches"
  // "eval.tasks": loglikelihood tasks (docs/eval.md) scored by rank 0 at every evaluation, with a context of
  // seq_len tokens; metrics.jsonl rows gain "TASK/METRIC" (acc, acc_norm, ...). Needs "tokenizer".
  struct EvalTask {
    std::string task;      // a task name (eval/tasks.h) or a generic-schema folder of data_dir
    std::string data_dir;  // DATA_DIR/TASK/SPLIT.jsonl
    int64_t limit = 0;     // the first N items (0: all)
    int num_fewshot = -1;  // -1: the task's default
  };
  std::vector<EvalTask> eval_tasks;

  std::string out_dir = "runs/train";  // "out": metrics.jsonl, plot, the final checkpoint in out/model
  int64_t log_every = 1;               // "log.every"
  std::string save_dtype = "bf16";     // "save_dtype"

  // Training checkpoints (ckpt/checkpoint.h; "checkpoint" in TRAIN.json): every `ckpt_every` steps and at
  // the end (0 = never), under ckpt_dir (default <out>/checkpoints); retention keeps the newest
  // `ckpt_keep_last` and every step that is a multiple of `ckpt_keep_every` (0 = none) forever.
  int64_t ckpt_every = 0;       // "checkpoint.every"
  int64_t ckpt_keep_last = 3;   // "checkpoint.keep_last"
  int64_t ckpt_keep_every = 0;  // "checkpoint.keep_every"
  std::string ckpt_dir;         // "checkpoint.dir"
  // Saves are asynchronous (ckpt/async_saver.h: the stall is a copy into a staging buffer as large as the
  // rank's state) unless "checkpoint.async" is false; "checkpoint.io_threads" write streams. A save that
  // fails (disk full, I/O error) leaves the previous checkpoint as it was; "checkpoint.on_error": "continue"
  // (warn, try again at the next save) or "stop" (end the run cleanly, exit status 1).
  bool ckpt_async = true;
  int64_t ckpt_io_threads = 4;
  std::string ckpt_on_error = "continue";

  // Bad steps ("fault"): a step whose loss or gradient norm is not finite, or (with spike_zscore > 0) whose
  // loss lies more than spike_zscore standard deviations above the mean of the previous spike_window
  // accepted losses, applies no update. After max_bad_steps consecutive bad steps (0 = never) the run rolls
  // back to the newest checkpoint and continues with the data after the bad batches.
  int64_t max_bad_steps = 3;   // "fault.max_bad_steps"
  double spike_zscore = 0;     // "fault.spike_zscore" (0 = no spike detection)
  int64_t spike_window = 100;  // "fault.spike_window"

  std::string text;  // the TRAIN.json text as given (saved in every checkpoint's manifest)

  std::string sample_prompt = "The";  // "sample.prompt"
  int64_t sample_tokens = 48;         // "sample.max_new_tokens"
  float sample_temperature = 0.8f;    // "sample.temperature"
  int64_t sample_top_k = 40;          // "sample.top_k"

  int64_t tokens_per_step() const { return micro_batch * seq_len * grad_accum; }
};

// Parses TRAIN.json (paths in it are used as given, relative to the working directory). Errors name the file
// and the field; unknown fields are errors too (a typo must not silently fall back to a default).
TrainConfig load_train_config(const std::string& path);
TrainConfig parse_train_config(const std::string& json_text, const std::string& source);

}  // namespace zaya::train
