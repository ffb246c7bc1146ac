// A tiny training setup shared by the trainer, checkpoint and data-parallel tests: a small repetitive English
// corpus (enough structure for the loss to fall within a few steps), a 512-token BPE tokenizer trained on it,
// prepared .bin/.idx shards with a validation split, and a tiny ZAYA1 config with every feature on.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "data/prepare.h"
#include "test_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace zaya::test {

inline const char* kTinyModel =
    R"({"model_type": "zaya", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32,
  "num_experts": 4, "router_hidden_size": 16, "layer_types": ["hybrid", "hybrid_sliding"], "sliding_window": 8,
  "tie_word_embeddings": true, "eos_token_id": 1})";

// Fills `dir` (created, emptied first) with corpus/, tokenizer.json, data.{train,val}.{bin,idx} and
// model.json. `sentence_stride` varies the document texts between test files.
inline void write_tiny_training_dir(const std::filesystem::path& dir, int sentence_stride = 7) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir / "corpus");
  const char* sentences[] = {"the cat sat on the mat. ", "a dog ran in the park. ", "the bird sang a song. ",
                             "we read the old book. "};
  for (int d = 0; d < 12; d++) {
    std::ofstream f(dir / "corpus" / ("doc" + std::to_string(d) + ".txt"));
    for (int i = 0; i < 60; i++) f << sentences[(i * sentence_stride + d) % 4];
  }
  BpeTrainerOptions bo;
  bo.vocab_size = 512;
  BpeTrainer trainer(bo);
  for (const auto& e : fs::directory_iterator(dir / "corpus")) trainer.add_text(read_text(e.path().string()));
  std::ofstream(dir / "tokenizer.json") << trainer.train();
  Tokenizer tok = Tokenizer::load((dir / "tokenizer.json").string());
  data::PrepareOptions po;
  po.corpus.inputs = {(dir / "corpus").string()};
  po.out_prefix = (dir / "data").string();
  po.val_fraction = 0.2;
  po.progress = false;
  data::prepare_dataset(tok, po);
  std::ofstream(dir / "model.json") << kTinyModel;
}

// TRAIN.json text for the tiny run of `dir` (write_tiny_training_dir) writing to `out`: 8 steps of
// micro_batch x 32 tokens x 2 accumulated, fp32, cosine schedule, the rprop controller, Muon's Newton–Schulz
// on fp32 operands (the tests compare runs across world sizes, whose ~1e-7 gradient-sum noise bf16 rounding
// would amplify: tests/dist_test.cpp kMuon), no validation during the run and no sample; checkpoints every
// `ckpt_every` steps keeping `keep_last`. `checkpoint_extra` continues the "checkpoint" object (", \"async\":
// false"), `top_extra` the top level.
inline std::string tiny_train_json(const std::filesystem::path& dir, const std::filesystem::path& out,
                                   int seed, int micro_batch, int ckpt_every, int keep_last,
                                   const std::string& checkpoint_extra = "",
                                   const std::string& top_extra = "") {
  return R"({"model": {"config": ")" + (dir / "model.json").string() + R"(", "seed": )" +
         std::to_string(seed) +
         R"(},
      "data": {"train": ")" +
         (dir / "data.train").string() + R"(", "val": ")" + (dir / "data.val").string() + R"("},
      "optim": {"lr": 0.01, "schedule": {"kind": "cosine", "warmup_steps": 2}, "balancer": {"rule": "rprop"},
                "muon": {"ns_dtype": "fp32"}},
      "batch": {"micro_batch": )" +
         std::to_string(micro_batch) + R"(, "seq_len": 32, "grad_accum": 2}, "steps": 8,
      "eval": {"every": 0, "batches": 1}, "out": ")" +
         out.string() + R"(", "save_dtype": "fp32", "sample": {"max_new_tokens": 0},
      "checkpoint": {"every": )" +
         std::to_string(ckpt_every) + R"(, "keep_last": )" + std::to_string(keep_last) + checkpoint_extra +
         "}" + top_extra + "}";
}

}  // namespace zaya::test
