// `zaya train` end to end on real files: a tiny corpus → trained tokenizer → prepared shards → a few
// training steps of a small ZAYA1 → metrics, the saved model (its validation loss equals the trainer's bit
// for bit), sample; plus TRAIN.json
// errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "eval/cloze.h"
#include "kernels/loss.h"
#include "model/zaya.h"
#include "test_util.h"
#include "tiny_training_data.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "train/train_config.h"
#include "train/trainer.h"

using namespace zaya;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fs::path dir;
  Fixture() {
    // One directory per test process (ctest may run the tests of this file in parallel), removed at exit.
    static const test::TempDir process_dir("train_test");
    dir = process_dir.path;
    test::write_tiny_training_dir(dir, 7);
  }
  std::string train_json(const std::string& extra = "") const {
    return R"({"model": {"config": ")" + (dir / "model.json").string() + R"(", "seed": 3},
      "data": {"train": ")" +
           (dir / "data.train").string() + R"(", "val": ")" + (dir / "data.val").string() + R"("},
      "tokenizer": ")" +
           (dir / "tokenizer.json").string() + R"(",
      "optim": {"lr": 0.01, "schedule": {"kind": "cosine", "warmup_steps": 2}},
      "batch": {"micro_batch": 4, "seq_len": 32, "grad_accum": 2}, "steps": 12, "eval": {"every": 6, "batches": 2},
      "out": ")" +
           (dir / "run").string() + R"(", "save_dtype": "fp32",
      "sample": {"prompt": "the cat", "max_new_tokens": 8})" +
           extra + "}";
  }
};

}  // namespace

TEST(Train, EndToEndOnRealFiles) {
  Fixture fx;
  train::TrainConfig c = train::parse_train_config(fx.train_json(), "train.json");
  train::TrainSummary s = train::run_training(c);
  EXPECT_EQ(s.steps, 12);
  EXPECT_EQ(s.skipped_steps, 0);
  // The loss must fall: first logged loss vs the last.
  std::ifstream m(fx.dir / "run" / "metrics.jsonl");
  std::string line, first, last;
  int rows = 0;
  while (std::getline(m, line)) {
    if (first.empty()) first = line;
    last = line;
    rows++;
  }
  EXPECT_EQ(rows, 12);
  double loss0 = nlohmann::json::parse(first)["loss"].get<double>();
  EXPECT_LT(s.final_train_loss, loss0 - 0.5)
      << "loss did not fall: " << loss0 << " -> " << s.final_train_loss;
  EXPECT_GT(s.final_val_loss, 0);
  auto j = nlohmann::json::parse(last);
  EXPECT_EQ(j["load_entropy"].size(), 2u);
  EXPECT_EQ(j["expert_counts"][0].size(), 5u);
  // The saved model (fp32) is the trained one: its logits on the validation batches the trainer scored
  // (the same loader, seed and batch shapes as train/trainer.cpp's validation_loss) give the trainer's final
  // validation loss bit for bit, and a validation loss this low is not that of a fresh model.
  ZayaModel model = ZayaModel::load((fx.dir / "run" / "model").string());
  EXPECT_EQ(model.cfg.num_experts, 4);
  data::DataLoader loader(data::IndexedDataset::open((fx.dir / "data.val").string()), 12345);
  double sum = 0;
  int64_t count = 0;
  ForwardScratch sc;
  ForwardResult res;
  for (int64_t i = 0; i < c.eval_batches; i++) {
    data::Batch b = loader.next_batch(c.micro_batch, c.seq_len);
    ZayaCache cache(model.cfg, b.rows);
    zaya_forward(model, cache, b.input_ids.data(), nullptr, b.rows, b.seq_len, {}, res, sc);
    int64_t n = 0;
    sum += cross_entropy_forward(nullptr, res.logits.data(), b.targets.data(), b.rows * b.seq_len,
                                 model.cfg.vocab_size, &n) *
           double(n);
    count += n;
  }
  ASSERT_GT(count, 0);
  EXPECT_EQ(sum / double(count), s.final_val_loss)
      << "the saved model's logits differ from the trained model's";
  EXPECT_TRUE(fs::exists(fx.dir / "run" / "model" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(fx.dir / "run" / "sample.txt"));
  fs::remove_all(fx.dir);
}

// eval.tasks: a cloze task built from the corpus (eval/cloze.h) is scored at every evaluation; those rows of
// metrics.jsonl, and only those, carry its accuracies. A task that cannot be read stops the run before
// step 1.
TEST(Train, EvalTasksAreScoredAtEveryEvaluation) {
  Fixture fx;
  std::vector<std::string> docs;
  for (const auto& e : fs::directory_iterator(fx.dir / "corpus"))
    docs.push_back(test::read_text(e.path().string()));
  eval::ClozeOptions co;
  co.items = 24;
  co.context_words = 6;
  co.seed = 3;
  fs::create_directories(fx.dir / "tasks" / "cloze");
  {
    std::ofstream f(fx.dir / "tasks" / "cloze" / "test.jsonl");
    for (const auto& j : eval::build_cloze_items(docs, co)) f << j.dump() << "\n";
  }
  auto t = nlohmann::json::parse(fx.train_json());
  t["eval"]["tasks"] = {{{"task", "cloze"}, {"data_dir", (fx.dir / "tasks").string()}, {"limit", 20}}};
  train::TrainConfig c = train::parse_train_config(t.dump(), "train.json");
  ASSERT_EQ(c.eval_tasks.size(), 1u);
  EXPECT_EQ(c.eval_tasks[0].limit, 20);
  train::run_training(c);
  std::ifstream m(fx.dir / "run" / "metrics.jsonl");
  int evaluated = 0;
  for (std::string line; std::getline(m, line);) {
    const auto row = nlohmann::json::parse(line);
    EXPECT_EQ(row.contains("cloze/acc"), row.contains("val_loss")) << line;
    if (!row.contains("val_loss")) continue;
    evaluated++;
    for (const char* k : {"cloze/acc", "cloze/acc_norm"}) {
      ASSERT_TRUE(row.contains(k)) << line;
      const double v = row[k].get<double>();
      EXPECT_TRUE(v >= 0 && v <= 1) << k << " = " << v;
    }
  }
  EXPECT_EQ(evaluated, 2);  // steps 6 and 12
  // A task whose files are missing: an error naming the file before any step.
  t["eval"]["tasks"][0]["data_dir"] = (fx.dir / "nowhere").string();
  t["out"] = (fx.dir / "run2").string();
  c = train::parse_train_config(t.dump(), "train.json");
  try {
    train::run_training(c);
    ADD_FAILURE() << "expected an error for a missing task file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nowhere"), std::string::npos) << e.what();
  }
  fs::remove_all(fx.dir);
}

// A legacy checkpoint continues training with the semantics of the code it was released with (spec §8.4)
// unless model.semantics says otherwise, and the saved model records the semantics it trained with, so it
// loads back the same way.
TEST(Train, LegacyInitTrainsWithItsOwnSemanticsAndRecordsThem) {
  Fixture fx;
  const std::string legacy_dir = test::data_dir() + "/ref_legacy_8b";  // vocab 512, like the tiny tokenizer
  for (const std::string sem : {"", "native", "legacy"}) {
    SCOPED_TRACE("model.semantics '" + sem + "'");
    auto j = nlohmann::json::parse(fx.train_json());
    j["model"] = {{"init_from", legacy_dir}};
    if (!sem.empty()) j["model"]["semantics"] = sem;
    j["steps"] = 3;
    j["eval"] = {{"every", 0}};
    j["sample"] = {{"max_new_tokens", 0}};
    train::TrainConfig c = train::parse_train_config(j.dump(), "train.json");
    const bool legacy = sem != "native";
    EXPECT_EQ(c.model.semantics, legacy ? Semantics::Legacy : Semantics::Native);
    EXPECT_EQ(c.model.skip_passthrough, legacy);
    train::TrainSummary s = train::run_training(c);
    EXPECT_EQ(s.steps, 3);
    EXPECT_TRUE(std::isfinite(s.final_train_loss));
    const std::string saved = (fx.dir / "run" / "model").string();
    EXPECT_EQ(
        test::read_text(saved + "/config.json").find("\"zaya_semantics\": \"legacy\"") != std::string::npos,
        legacy);
    ZayaModel m = ZayaModel::load(saved);
    EXPECT_EQ(m.cfg.semantics, legacy ? Semantics::Legacy : Semantics::Native);
    EXPECT_EQ(m.cfg.router_eps(), c.model.router_eps());
    fs::remove_all(fx.dir / "run");
  }
  auto j = nlohmann::json::parse(fx.train_json());
  j["model"]["semantics"] = "legacy";  // the tiny config is native: no legacy code ran it
  EXPECT_THROW(train::parse_train_config(j.dump(), "train.json"), Error);
  j["model"]["semantics"] = "old";
  try {
    train::parse_train_config(j.dump(), "train.json");
    ADD_FAILURE() << "expected an error naming model.semantics";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.semantics"), std::string::npos) << e.what();
  }
  fs::remove_all(fx.dir);
}

TEST(Train, ConfigErrorsNameTheField) {
  Fixture fx;
  auto expect_error = [&](const std::string& text, const std::string& part) {
    try {
      train::parse_train_config(text, "train.json");
      ADD_FAILURE() << "expected an error mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("train.json"), std::string::npos) << e.what();
    }
  };
  expect_error("{", "JSON");
  expect_error(fx.train_json(R"(, "stepz": 3)"),
               "field 'stepz' is not a known field (did you mean 'steps'?)");
  // A dataset is named by its prefix; the path of its .bin or .idx file means the same.
  {
    auto t = nlohmann::json::parse(fx.train_json());
    t["data"]["train"] = (fx.dir / "data.train.bin").string();
    t["data"]["val"] = (fx.dir / "data.val.idx").string();
    train::TrainConfig c = train::parse_train_config(t.dump(), "train.json");
    EXPECT_EQ(c.train_data, (fx.dir / "data.train").string());
    EXPECT_EQ(c.val_data, (fx.dir / "data.val").string());
  }
  // Nested fields are named by their JSON path, with the nearest known one.
  {
    auto t = nlohmann::json::parse(fx.train_json());
    t["optim"]["learning_rate"] = 0.1;
    expect_error(t.dump(), "field 'optim.learning_rate' is not a known field (did you mean 'optim.lr'?)");
    t = nlohmann::json::parse(fx.train_json());
    t["batch"]["micro_bach"] = 2;
    expect_error(t.dump(),
                 "field 'batch.micro_bach' is not a known field (did you mean 'batch.micro_batch'?)");
    t = nlohmann::json::parse(fx.train_json());
    t["batch"]["seq_len"] = "long";
    expect_error(t.dump(), "field 'batch.seq_len' must be an integer");
  }
  expect_error(fx.train_json(R"(, "dtype": "fp16")"), "dtype");
  expect_error(R"({"data": {"train": "x"}})", "model");
  expect_error(R"({"model": {"config": "m.json"}})", "data.train");
  auto j = nlohmann::json::parse(fx.train_json());
  j["batch"]["seq_len"] = 0;
  expect_error(j.dump(), "seq_len");
  j = nlohmann::json::parse(fx.train_json());
  j["optim"]["muon"] = {{"ns_steps", "five"}};
  expect_error(j.dump(), "ns_steps");
  // Checkpoint and bad-step fields.
  expect_error(fx.train_json(R"(, "checkpoint": {"on_error": "retry"})"), "checkpoint.on_error");
  expect_error(fx.train_json(R"(, "checkpoint": {"async": "yes"})"), "async");
  expect_error(fx.train_json(R"(, "checkpoint": {"io_threads": 0})"), "io_threads");
  expect_error(fx.train_json(R"(, "fault": {"max_bad_steps": -1})"), "max_bad_steps");
  expect_error(fx.train_json(R"(, "fault": {"spike_zscore": 0.5})"), "fault.spike_zscore");
  expect_error(fx.train_json(R"(, "fault": {"spike_window": 1})"), "spike_window");
  expect_error(fx.train_json(R"(, "fault": {"max_bad": 3})"), "max_bad");
  // eval.tasks: an array of {task, data_dir, limit, num_fewshot}, with a tokenizer.
  j = nlohmann::json::parse(fx.train_json());
  j["eval"]["tasks"] = {{{"task", "hellaswag"}}};
  expect_error(j.dump(), "eval.tasks[0]");
  j["eval"]["tasks"] = {{{"task", "hellaswag"}, {"data_dir", "d"}, {"limt", 3}}};
  expect_error(j.dump(),
               "field 'eval.tasks[].limt' is not a known field (did you mean 'eval.tasks[].limit'?)");
  j["eval"]["tasks"] = {{"task", "hellaswag"}};
  expect_error(j.dump(), "eval.tasks");
  j["eval"]["tasks"] = {{{"task", "hellaswag"}, {"data_dir", "d"}}};
  j.erase("tokenizer");
  expect_error(j.dump(), "needs 'tokenizer'");
  fs::remove_all(fx.dir);
}
