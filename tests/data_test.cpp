// The data pipeline on real files in a temp dir: Megatron .bin/.idx writing and reading (and every kind of
// malformed index), `prepare` on text / paragraph / JSONL corpora read back token for token, the
// validation split, malformed corpora, the packed loader (determinism, resume, sharding, epochs), and
// `zaya data prepare` through the real binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/threads.h"
#include "data/corpus.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "test_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace zaya;
using namespace zaya::data;

namespace {

// One directory per test process (ctest may run this file's tests side by side), removed at exit.
fs::path work_dir() {
  static const test::TempDir dir("data_test");
  return dir.path;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = work_dir() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string read_bytes(const fs::path& path) {
  return zaya::test::read_text(path.string());
}

// A small byte-level tokenizer trained here, so the tests need no downloaded files.
const Tokenizer& tokenizer() {
  static Tokenizer tok = [] {
    BpeTrainerOptions opt;
    opt.vocab_size = 400;
    opt.min_frequency = 1;
    BpeTrainer trainer(opt);
    for (int i = 0; i < 20; i++)
      trainer.add_text("The quick brown fox jumps over the lazy dog. Documents are packed into rows; " +
                       std::to_string(i));
    return Tokenizer::from_json(trainer.train(), "test_tokenizer.json");
  }();
  return tok;
}

std::vector<uint32_t> expected_tokens(const std::string& doc, bool eos = true) {
  std::vector<int32_t> ids = tokenizer().encode(doc, false);
  std::vector<uint32_t> out(ids.begin(), ids.end());
  if (eos) out.push_back(uint32_t(tokenizer().eos_id()));
  return out;
}

// Expects fn to throw zaya::Error whose message contains every part.
template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a zaya::Error containing '" << parts[0] << "'";
  } catch (const zaya::Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

std::vector<std::vector<uint32_t>> read_all(const std::string& prefix) {
  auto ds = IndexedDataset::open(prefix);
  std::vector<std::vector<uint32_t>> docs;
  for (size_t i = 0; i < ds->num_sequences(); i++) docs.push_back(ds->sequence(i));
  return docs;
}

// ---- .bin/.idx ----

TEST(IndexedDataset, WriteReadRoundTripAndHeader) {
  std::string prefix = (work_dir() / "rt").string();
  std::vector<std::vector<uint32_t>> docs = {{1, 2, 3}, {}, {7}, {0x7fffffff, 5, 6, 9}};
  {
    IndexedDatasetWriter w(prefix);
    for (auto& d : docs) w.add_document(d.data(), d.size());
    EXPECT_EQ(w.documents(), 4u);
    EXPECT_EQ(w.tokens(), 8u);
    w.finish();
  }
  EXPECT_EQ(read_all(prefix), docs);
  auto ds = IndexedDataset::open(prefix);
  EXPECT_EQ(ds->num_tokens(), 8u);
  EXPECT_EQ(ds->dtype_code(), kDTypeInt32);
  EXPECT_EQ(ds->doc_idx(), (std::vector<int64_t>{0, 1, 2, 3, 4}));

  // The header byte for byte: magic, version 1, dtype 4, 4 sequences, 5 doc_idx entries.
  std::string idx = read_bytes(prefix + ".idx");
  ASSERT_EQ(idx.size(), 34u + 12 * 4 + 8 * 5);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  uint64_t version, seqs, ndocs;
  std::memcpy(&version, idx.data() + 9, 8);
  std::memcpy(&seqs, idx.data() + 18, 8);
  std::memcpy(&ndocs, idx.data() + 26, 8);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(uint8_t(idx[17]), 4);
  EXPECT_EQ(seqs, 4u);
  EXPECT_EQ(ndocs, 5u);
  int64_t ptr3;
  std::memcpy(&ptr3, idx.data() + 34 + 16 + 3 * 8, 8);
  EXPECT_EQ(ptr3, 4 * 4);  // byte offset of the 4th sequence

  // parse(serialize(x)) == x.
  IndexContents parsed =
      parse_index(reinterpret_cast<const uint8_t*>(idx.data()), idx.size(), 8 * 4, prefix + ".idx");
  EXPECT_EQ(serialize_index(parsed), idx);
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(prefix + ".idx.tmp"));
}

TEST(IndexedDataset, ReadsUint16Shards) {
  std::string prefix = (work_dir() / "u16").string();
  std::vector<uint16_t> tokens = {10, 65535, 3, 4, 5};
  write_file(prefix + ".bin", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  IndexContents index;
  index.dtype_code = kDTypeUInt16;
  index.sizes = {2, 3};
  index.pointers = {0, 4};
  index.doc_idx = {0, 2};
  write_file(prefix + ".idx", serialize_index(index));
  EXPECT_EQ(read_all(prefix), (std::vector<std::vector<uint32_t>>{{10, 65535}, {3, 4, 5}}));
}

TEST(IndexedDataset, WriterAbandonedLeavesNothing) {
  std::string prefix = (work_dir() / "abandoned").string();
  {
    IndexedDatasetWriter w(prefix);
    uint32_t t[2] = {1, 2};
    w.add_document(t, 2);
  }
  EXPECT_FALSE(fs::exists(prefix + ".bin"));
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(prefix + ".idx"));
}

TEST(IndexedDataset, MalformedIndexErrors) {
  IndexContents good;
  good.dtype_code = kDTypeInt32;
  good.sizes = {2, 3};
  good.pointers = {0, 8};
  good.doc_idx = {0, 1, 2};
  const std::string base = serialize_index(good);
  auto parse = [&](const std::string& bytes, uint64_t bin = 20) {
    return parse_index(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), bin, "x.idx");
  };
  EXPECT_NO_THROW(parse(base));
  auto patched = [&](size_t at, const void* v, size_t n) {
    std::string s = base;
    std::memcpy(s.data() + at, v, n);
    return s;
  };
  expect_error([&] { parse(base.substr(0, 20)); }, {"x.idx", "truncated"});
  expect_error([&] { parse(""); }, {"x.idx", "truncated"});
  expect_error([&] { parse(patched(0, "MMIDIDY", 7)); }, {"x.idx", "magic"});
  uint64_t v2 = 2;
  expect_error([&] { parse(patched(9, &v2, 8)); }, {"x.idx", "version 2"});
  uint8_t code = 6;
  expect_error([&] { parse(patched(17, &code, 1)); }, {"x.idx", "dtype code 6"});
  uint64_t many = 1ull << 60;
  expect_error([&] { parse(patched(18, &many, 8)); }, {"x.idx", "sequence count"});
  expect_error([&] { parse(patched(26, &many, 8)); }, {"x.idx", "document count"});
  expect_error([&] { parse(base + "extra"); }, {"x.idx", "does not match"});
  int32_t neg = -1;
  expect_error([&] { parse(patched(34, &neg, 4)); }, {"x.idx", "sizes[0]", "negative"});
  int32_t big = 100;
  expect_error([&] { parse(patched(38, &big, 4)); }, {"x.idx", "sequence 1", "past the end"});
  int64_t far = 1 << 20;
  expect_error([&] { parse(patched(42 + 8, &far, 8)); }, {"x.idx", "pointers[1]", "past the end"});
  int64_t negp = -4;
  expect_error([&] { parse(patched(42, &negp, 8)); }, {"x.idx", "pointers[0]"});
  int64_t odd = 2;
  expect_error([&] { parse(patched(42 + 8, &odd, 8)); }, {"x.idx", "pointers[1]", "multiple"});
  int64_t one = 1;
  expect_error([&] { parse(patched(58, &one, 8)); }, {"x.idx", "doc_idx[0]"});
  int64_t past = 7;
  expect_error([&] { parse(patched(66, &past, 8)); }, {"x.idx", "doc_idx[1]"});
  expect_error([&] { parse(base, 12); }, {"x.idx", "past the end of the data file (12 bytes)"});

  // Files: a missing pair names the missing file.
  expect_error([&] { IndexedDataset::open((work_dir() / "nothing").string()); }, {"nothing.bin"});
  std::string prefix = (work_dir() / "bad_magic").string();
  write_file(prefix + ".bin", std::string(20, '\0'));
  write_file(prefix + ".idx", patched(0, "XXXX", 4));
  expect_error([&] { IndexedDataset::open(prefix); }, {"bad_magic.idx", "magic"});
}

// ---- prepare ----

PrepareOptions prepare_options(const fs::path& input, const std::string& out) {
  PrepareOptions opt;
  opt.corpus.inputs = {input.string()};
  opt.out_prefix = out;
  opt.progress = false;
  return opt;
}

TEST(Prepare, TextFilesOneDocumentPerFileInSortedOrder) {
  fs::path dir = fresh_dir("text_in");
  std::vector<std::string> docs = {"The quick brown fox.\n", "jumps over\n\nthe lazy dog",
                                   "unicode: héllo ☃ \x01\t!"};
  write_file(dir / "b.txt", docs[1]);
  write_file(dir / "a.txt", docs[0]);
  fs::create_directories(dir / "sub");
  write_file(dir / "sub" / "c.txt", docs[2]);
  write_file(dir / "empty.txt", "");
  write_file(dir / ".hidden", "never read");
  std::string out = (work_dir() / "text_out").string();
  PrepareStats s = prepare_dataset(tokenizer(), prepare_options(dir, out));
  EXPECT_EQ(s.documents, 3u);
  // Sorted paths: a.txt, b.txt, empty.txt (skipped), sub/c.txt.
  std::vector<std::vector<uint32_t>> expect = {expected_tokens(docs[0]), expected_tokens(docs[1]),
                                               expected_tokens(docs[2])};
  EXPECT_EQ(read_all(out + ".train"), expect);
  EXPECT_FALSE(fs::exists(out + ".val.idx"));
  uint64_t tokens = 0;
  for (auto& e : expect) tokens += e.size();
  EXPECT_EQ(s.tokens, tokens);
  EXPECT_EQ(s.bytes, docs[0].size() + docs[1].size() + docs[2].size());
  auto j = zaya::test::read_json(out + ".json");
  EXPECT_EQ(j["documents"], 3);
  EXPECT_EQ(j["tokens"], tokens);
  EXPECT_EQ(j["train"]["documents"], 3);
  EXPECT_EQ(j["eos_id"], tokenizer().eos_id());
}

TEST(Prepare, ParagraphsAndNoEos) {
  fs::path dir = fresh_dir("para_in");
  write_file(dir / "p.txt", "first para\nline two\n\n  \n\nsecond\r\n\nthird");
  std::string out = (work_dir() / "para_out").string();
  PrepareOptions opt = prepare_options(dir / "p.txt", out);
  opt.corpus.text_doc_split = TextDocSplit::kParagraph;
  opt.append_eos = false;
  prepare_dataset(tokenizer(), opt);
  EXPECT_EQ(read_all(out + ".train"),
            (std::vector<std::vector<uint32_t>>{expected_tokens("first para\nline two", false),
                                                expected_tokens("second", false),
                                                expected_tokens("third", false)}));
}

TEST(Prepare, JsonlField) {
  fs::path dir = fresh_dir("jsonl_in");
  write_file(dir / "d.jsonl",
             "{\"text\": \"doc one\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"doc \\u00e9 "
             "two\\n\"}\n{\"text\": \"\"}\n");
  std::string out = (work_dir() / "jsonl_out").string();
  PrepareOptions opt = prepare_options(dir, out);
  opt.corpus.format = CorpusFormat::kJsonl;
  prepare_dataset(tokenizer(), opt);
  EXPECT_EQ(read_all(out + ".train"),
            (std::vector<std::vector<uint32_t>>{expected_tokens("doc one"),
                                                expected_tokens("doc \xc3\xa9 two\n")}));
  write_file(dir / "d.jsonl", "{\"body\": \"x\"}\n");
  opt.corpus.jsonl_field = "body";
  opt.overwrite = true;  // the same prefix again: replacing it is deliberate here
  prepare_dataset(tokenizer(), opt);
  EXPECT_EQ(read_all(out + ".train"), (std::vector<std::vector<uint32_t>>{expected_tokens("x")}));
}

TEST(Prepare, ValidationSplitIsDisjointCompleteAndDeterministic) {
  fs::path dir = fresh_dir("val_in");
  std::string lines;
  std::vector<std::string> docs;
  for (int i = 0; i < 200; i++) {
    docs.push_back("document number " + std::to_string(i) + (i % 3 ? " the fox" : " dog"));
    lines += nlohmann::json({{"text", docs.back()}}).dump() + "\n";
  }
  write_file(dir / "all.jsonl", lines);
  auto run = [&](const std::string& name, int threads, uint64_t seed) {
    std::string out = (work_dir() / name).string();
    PrepareOptions opt = prepare_options(dir, out);
    opt.corpus.format = CorpusFormat::kJsonl;
    opt.val_fraction = 0.25;
    opt.seed = seed;
    int saved = num_threads();
    set_num_threads(threads);
    PrepareStats s = prepare_dataset(tokenizer(), opt);
    set_num_threads(saved);
    EXPECT_EQ(s.train_documents + s.val_documents, 200u);
    return out;
  };
  std::string a = run("val_a", 1, 7), b = run("val_b", 2, 7), c = run("val_c", 1, 8);
  // Same seed: identical bytes, whatever the thread count.
  for (std::string ext : {".train.bin", ".train.idx", ".val.bin", ".val.idx"})
    EXPECT_EQ(read_bytes(a + ext), read_bytes(b + ext)) << ext;
  EXPECT_NE(read_bytes(a + ".val.idx"), read_bytes(c + ".val.idx"));  // another seed, another split

  // Disjoint and complete: train + val, interleaved back by the split rule, is every document in order.
  auto train = read_all(a + ".train"), val = read_all(a + ".val");
  EXPECT_GT(val.size(), 25u);
  EXPECT_LT(val.size(), 75u);
  size_t ti = 0, vi = 0;
  for (size_t d = 0; d < docs.size(); d++) {
    bool is_val = is_validation_document(d, 7, 0.25);
    const auto& got = is_val ? val.at(vi++) : train.at(ti++);
    EXPECT_EQ(got, expected_tokens(docs[d])) << d;
  }
  EXPECT_EQ(ti, train.size());
  EXPECT_EQ(vi, val.size());
}

TEST(Prepare, MalformedCorpusErrors) {
  fs::path dir = fresh_dir("bad_in");
  std::string out = (work_dir() / "bad_out").string();
  auto jsonl = [&](const std::string& content, const std::string& field = "text") {
    write_file(dir / "x.jsonl", content);
    PrepareOptions opt = prepare_options(dir / "x.jsonl", out);
    opt.corpus.format = CorpusFormat::kJsonl;
    opt.corpus.jsonl_field = field;
    prepare_dataset(tokenizer(), opt);
  };
  expect_error([&] { jsonl("{\"text\": \"ok\"}\n{\"text\": oops}\n"); }, {"x.jsonl:2", "not valid JSON"});
  expect_error([&] { jsonl("{\"text\": \"ok\"}\n\n{\"other\": \"a\"}\n"); },
               {"x.jsonl:3", "no field 'text'"});
  expect_error([&] { jsonl("{\"body\": 5}\n", "body"); }, {"x.jsonl:1", "field 'body'", "not a string"});
  expect_error([&] { jsonl("[1, 2]\n"); }, {"x.jsonl:1", "JSON object"});
  // A number beyond double (found by data_fuzz): nlohmann throws out_of_range, not parse_error; it used to
  // escape as an uncaught exception.
  expect_error([&] { jsonl("{\"text\": \"ok\", \"n\": 1e400}\n"); }, {"x.jsonl:1", "not valid JSON"});
  expect_error([&] { jsonl("\n{\"text\": \"\"}\n"); }, {"corpus is empty"});
  expect_error([&] { prepare_dataset(tokenizer(), prepare_options(dir / "missing.txt", out)); },
               {"missing.txt", "does not exist"});
  fs::path empty_dir = fresh_dir("empty_dir");
  expect_error([&] { prepare_dataset(tokenizer(), prepare_options(empty_dir, out)); }, {"corpus is empty"});
  write_file(dir / "ok.txt", "text");
  PrepareOptions opt = prepare_options(dir / "ok.txt", out);
  opt.val_fraction = 1.5;
  expect_error([&] { prepare_dataset(tokenizer(), opt); }, {"--val-fraction"});
  expect_error([] { parse_corpus_format("csv"); }, {"--format", "csv"});
  expect_error([] { parse_text_doc_split("line"); }, {"--text-doc-split", "line"});
  // A failed run leaves no output pair behind.
  EXPECT_FALSE(fs::exists((work_dir() / "bad_out.train.idx")));
}

// An empty split is an error naming the split and what to change (a training run on it would only say
// "dataset has no tokens"), and the failed run leaves no files.
TEST(Prepare, EmptySplitsAreErrors) {
  fs::path dir = fresh_dir("one_doc_in");
  write_file(dir / "only.txt", "just one document here");
  const std::string out = (work_dir() / "one_doc_out").string();
  // Seeds that send the one document to training (validation empty) and to validation (training empty).
  uint64_t to_train = 0, to_val = 0;
  while (is_validation_document(0, to_train, 0.05)) to_train++;
  while (!is_validation_document(0, to_val, 0.5)) to_val++;
  PrepareOptions opt = prepare_options(dir, out);
  opt.val_fraction = 0.05;
  opt.seed = to_train;
  expect_error([&] { prepare_dataset(tokenizer(), opt); },
               {"the validation split is empty", "--val-fraction 0.05 of 1 document(s) selected none",
                "add documents", "--val-fraction 0 for no validation split"});
  opt.val_fraction = 0.5;
  opt.seed = to_val;
  expect_error([&] { prepare_dataset(tokenizer(), opt); },
               {"the training split is empty", "all 1 document(s) into validation", "lower --val-fraction"});
  for (const char* ext : {".train.bin", ".train.idx", ".val.bin", ".val.idx", ".json", ".train.bin.tmp"})
    EXPECT_FALSE(fs::exists(out + ext)) << ext;
  opt.val_fraction = 0;  // no validation split: fine
  EXPECT_EQ(prepare_dataset(tokenizer(), opt).train_documents, 1u);
}

// Existing outputs are not overwritten unless asked; with overwrite every output of the prefix is replaced,
// so no stale validation split stays beside a new training split.
TEST(Prepare, ExistingOutputsNeedOverwrite) {
  fs::path dir = fresh_dir("again_in");
  for (int i = 0; i < 20; i++) write_file(dir / str_cat("d", i, ".txt"), str_cat("document ", i));
  const std::string out = (work_dir() / "again_out").string();
  PrepareOptions opt = prepare_options(dir, out);
  opt.val_fraction = 0.3;
  prepare_dataset(tokenizer(), opt);
  const std::string train_idx = read_bytes(out + ".train.idx"), stats = read_bytes(out + ".json");
  opt.val_fraction = 0;
  expect_error([&] { prepare_dataset(tokenizer(), opt); },
               {"--out " + out, out + ".train.bin", out + ".val.idx", "already exist", "--overwrite"});
  EXPECT_EQ(read_bytes(out + ".train.idx"), train_idx);
  EXPECT_EQ(read_bytes(out + ".json"), stats);
  opt.overwrite = true;
  EXPECT_EQ(prepare_dataset(tokenizer(), opt).train_documents, 20u);
  EXPECT_FALSE(fs::exists(out + ".val.bin")) << "the old validation split must not survive";
  EXPECT_FALSE(fs::exists(out + ".val.idx"));
}

// --out is a PREFIX: "DIR/" (or "DIR/.") would write hidden files ".train.bin" and ".json" inside DIR.
TEST(Prepare, OutMustBeAPrefixNotADirectory) {
  fs::path dir = fresh_dir("prefix_in");
  write_file(dir / "a.txt", "some text");
  const fs::path out_dir = fresh_dir("prefix_out");
  for (const std::string& bad : {out_dir.string() + "/", out_dir.string() + "/."}) {
    expect_error([&] { prepare_dataset(tokenizer(), prepare_options(dir, bad)); },
                 {"--out " + bad, "takes a PREFIX such as DIR/name", "not a directory"});
  }
  EXPECT_TRUE(fs::is_empty(out_dir)) << "no file with an empty name was written";
  // DIR/name is the way: the files go inside DIR.
  prepare_dataset(tokenizer(), prepare_options(dir, (out_dir / "name").string()));
  EXPECT_TRUE(fs::exists(out_dir / "name.train.bin"));
}

// ---- loader ----

// A dataset of n documents of varied lengths whose tokens encode (document, position).
std::shared_ptr<const IndexedDataset> make_dataset(const std::string& name, int n, bool with_eod) {
  std::string prefix = (work_dir() / name).string();
  IndexedDatasetWriter w(prefix);
  for (int d = 0; d < n; d++) {
    std::vector<uint32_t> t;
    int len = 1 + (d * 7) % 13;
    for (int i = 0; i < len; i++) t.push_back(uint32_t(1000 * (d + 1) + i));
    if (with_eod) t.push_back(1);
    w.add_document(t.data(), t.size());
  }
  w.finish();
  return IndexedDataset::open(prefix);
}

TEST(Loader, RowsArePackedShiftedWindowsOfTheShuffledStream) {
  for (int eod : {-1, 1}) {
    auto ds = make_dataset(eod < 0 ? "ld_eod" : "ld_plain", 30, eod < 0);
    DataLoader loader(ds, 42, eod);
    // Three epochs of stream, back to back.
    std::vector<uint32_t> stream;
    std::vector<bool> starts;
    for (uint64_t e = 0; e < 3; e++) {
      auto order = loader.epoch_order(e);
      std::vector<uint32_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (uint32_t i = 0; i < sorted.size(); i++) ASSERT_EQ(sorted[i], i);  // a permutation
      for (uint32_t d : order) {
        auto t = ds->sequence(d);
        for (size_t i = 0; i < t.size(); i++) starts.push_back(i == 0);
        stream.insert(stream.end(), t.begin(), t.end());
        if (eod >= 0) {
          stream.push_back(uint32_t(eod));
          starts.push_back(false);
        }
      }
    }
    EXPECT_NE(loader.epoch_order(0), loader.epoch_order(1));
    const int64_t B = 3, S = 16;
    uint64_t pos = 0;
    while (pos + B * S + 1 < stream.size()) {
      Batch b = loader.next_batch(B, S);
      ASSERT_EQ(b.rows, B);
      for (int64_t r = 0; r < B; r++) {
        std::vector<int32_t> expect_starts;
        for (int64_t t = 0; t < S; t++) {
          uint64_t p = pos + r * S + t;
          ASSERT_EQ(b.input_ids[r * S + t], int32_t(stream[p])) << p;
          ASSERT_EQ(b.targets[r * S + t], int32_t(stream[p + 1])) << p;
          if (starts[p]) expect_starts.push_back(int32_t(t));
        }
        EXPECT_EQ(b.doc_starts[r], expect_starts);
      }
      pos += B * S;
    }
    EXPECT_GE(loader.state().epoch, 1u);  // crossed an epoch boundary on the way
  }
}

TEST(Loader, DeterministicAndResumable) {
  auto ds = make_dataset("ld_resume", 50, true);
  DataLoader a(ds, 5), b(ds, 5), other(ds, 6);
  for (int i = 0; i < 10; i++) {
    Batch x = a.next_batch(4, 32), y = b.next_batch(4, 32);
    EXPECT_EQ(x.input_ids, y.input_ids);
    EXPECT_EQ(x.targets, y.targets);
  }
  EXPECT_NE(DataLoader(ds, 5).next_batch(4, 32).input_ids, other.next_batch(4, 32).input_ids);

  LoaderState saved = a.state();
  EXPECT_EQ(saved.seed, 5u);
  std::vector<Batch> continued;
  for (int i = 0; i < 20; i++) continued.push_back(a.next_batch(4, 32));
  DataLoader fresh(ds, 999);  // the state carries the seed
  fresh.restore(saved);
  for (int i = 0; i < 20; i++) {
    Batch r = fresh.next_batch(4, 32);
    EXPECT_EQ(r.input_ids, continued[i].input_ids) << i;
    EXPECT_EQ(r.targets, continued[i].targets) << i;
    EXPECT_EQ(r.doc_starts, continued[i].doc_starts) << i;
  }
  EXPECT_EQ(fresh.state(), a.state());
  expect_error([&] { fresh.restore({5, 0, fresh.tokens_per_epoch()}); }, {"position", "past the epoch"});
}

TEST(Loader, ShardedRanksReassembleTheGlobalBatch) {
  auto ds = make_dataset("ld_shard", 40, true);
  const int64_t B = 8, S = 12;
  DataLoader single(ds, 3);
  std::vector<Batch> global;
  for (int i = 0; i < 6; i++) global.push_back(single.next_batch(B, S));
  for (int world : {1, 2, 4}) {
    std::vector<DataLoader> ranks;
    for (int r = 0; r < world; r++) ranks.emplace_back(ds, 3);
    for (int i = 0; i < 6; i++) {
      std::vector<int32_t> inputs, targets;
      std::vector<std::vector<int32_t>> starts;
      for (int r = 0; r < world; r++) {
        Batch part = ranks[r].next_batch(B, S, r, world);
        EXPECT_EQ(part.rows, B / world);
        inputs.insert(inputs.end(), part.input_ids.begin(), part.input_ids.end());
        targets.insert(targets.end(), part.targets.begin(), part.targets.end());
        starts.insert(starts.end(), part.doc_starts.begin(), part.doc_starts.end());
      }
      EXPECT_EQ(inputs, global[i].input_ids) << "world " << world << " batch " << i;
      EXPECT_EQ(targets, global[i].targets);
      EXPECT_EQ(starts, global[i].doc_starts);
    }
    for (auto& r : ranks) EXPECT_EQ(r.state(), single.state());
  }
  DataLoader l(ds, 3);
  expect_error([&] { l.next_batch(2, 8, 2, 2); }, {"rank 2 of 2"});
  expect_error([&] { l.next_batch(0, 8); }, {"batch 0"});
}

TEST(Loader, PreparedDataDocumentStartsFollowEos) {
  fs::path dir = fresh_dir("e2e_in");
  for (int i = 0; i < 25; i++)
    write_file(dir / ("d" + std::to_string(100 + i) + ".txt"),
               std::string(size_t(1 + i % 4), 'x') + " the quick brown fox " + std::to_string(i));
  std::string out = (work_dir() / "e2e").string();
  prepare_dataset(tokenizer(), prepare_options(dir, out));
  DataLoader loader(IndexedDataset::open(out + ".train"), 11);
  const int32_t eos = tokenizer().eos_id();
  for (int step = 0; step < 20; step++) {
    Batch b = loader.next_batch(2, 10);
    for (int64_t r = 0; r < b.rows; r++) {
      std::vector<int32_t> expect;
      for (int64_t t = 1; t < b.seq_len; t++)
        if (b.input_ids[r * b.seq_len + t - 1] == eos) expect.push_back(int32_t(t));
      std::vector<int32_t> got = b.doc_starts[r];
      if (!got.empty() && got[0] == 0) got.erase(got.begin());  // row start: its previous token is elsewhere
      EXPECT_EQ(got, expect) << "step " << step << " row " << r;
    }
  }
}

TEST(Loader, RejectsEmptyDataset) {
  std::string prefix = (work_dir() / "ld_empty").string();
  IndexedDatasetWriter w(prefix);
  w.add_document(nullptr, 0);
  w.finish();
  expect_error([&] { DataLoader(IndexedDataset::open(prefix), 1); }, {"ld_empty", "no tokens"});
  EXPECT_NO_THROW(DataLoader(IndexedDataset::open(prefix), 1, /*eod_id=*/1));  // the eod alone is a stream
}

// ---- the command ----

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

TEST(DataCommand, PrepareWritesShardsAndStats) {
  fs::path dir = fresh_dir("cmd_in");
  std::string tok_path = (work_dir() / "cmd_tokenizer.json").string();
  {
    BpeTrainerOptions opt;
    opt.vocab_size = 300;
    BpeTrainer t(opt);
    t.add_text("hello world, hello data");
    write_file(tok_path, t.train());
  }
  for (int i = 0; i < 10; i++)
    write_file(dir / ("f" + std::to_string(i) + ".txt"), "hello world " + std::to_string(i));
  std::string out = (work_dir() / "cmd_out").string();
  Proc r = run_zaya("data prepare --input " + dir.string() + " --tokenizer " + tok_path + " --out " + out +
                    " --val-fraction 0.3 --seed 3 --no-progress");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("documents 10"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  auto j = zaya::test::read_json(out + ".json");
  EXPECT_EQ(j["documents"], 10);
  EXPECT_EQ(IndexedDataset::open(out + ".train")->num_sequences() +
                IndexedDataset::open(out + ".val")->num_sequences(),
            10u);
  Proc info = run_zaya("data info " + out + ".train");
  EXPECT_EQ(info.status, 0) << info.out;

  Proc bad =
      run_zaya("data prepare --input " + dir.string() + "/nope --tokenizer " + tok_path + " --out " + out);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("nope"), std::string::npos) << bad.out;

  // The same prefix again: refused, then replaced with --overwrite.
  const std::string args = "data prepare --input " + dir.string() + " --tokenizer " + tok_path +
                           " --val-fraction 0.3 --seed 3 --no-progress --out ";
  Proc again = run_zaya(args + out);
  EXPECT_NE(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("already exist; pass --overwrite"), std::string::npos) << again.out;
  Proc overwrite = run_zaya(args + out + " --overwrite");
  EXPECT_EQ(overwrite.status, 0) << overwrite.out;
  // A directory for --out: an error that says what --out takes; nothing written.
  const fs::path out_dir = fresh_dir("cmd_out_dir");
  Proc slash = run_zaya(args + out_dir.string() + "/");
  EXPECT_NE(slash.status, 0) << slash.out;
  EXPECT_NE(slash.out.find("takes a PREFIX such as DIR/name"), std::string::npos) << slash.out;
  EXPECT_TRUE(fs::is_empty(out_dir));
  // One document and a validation fraction that selects none of it: the empty split is named.
  const fs::path one = fresh_dir("cmd_one_doc");
  write_file(one / "only.txt", "hello world");
  uint64_t seed = 0;
  while (is_validation_document(0, seed, 0.05)) seed++;
  Proc empty = run_zaya("data prepare --input " + one.string() + " --tokenizer " + tok_path +
                        " --val-fraction 0.05 --no-progress --seed " + std::to_string(seed) + " --out " +
                        (work_dir() / "cmd_one_out").string());
  EXPECT_NE(empty.status, 0) << empty.out;
  EXPECT_NE(empty.out.find("the validation split is empty"), std::string::npos) << empty.out;
}

}  // namespace
