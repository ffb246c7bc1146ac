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

}  // namespace zaya::test
