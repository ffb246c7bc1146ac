#include "data/prepare.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/progress.h"
#include "data/split_hash.h"

namespace zaya::data {

bool is_validation_document(uint64_t doc_index, uint64_t seed, double val_fraction) {
  if (val_fraction <= 0) return false;
  // The top 53 bits as a double in [0, 1): exact, so the comparison is the same on every machine.
  uint64_t h = mix64(seed ^ mix64(doc_index + 0x5eed));
  double u = double(h >> 11) * 0x1.0p-53;
  return u < val_fraction;
}

namespace {

// The files prepare_dataset writes for `prefix`.
std::vector<std::string> output_files(const std::string& prefix) {
  return {prefix + ".train.bin", prefix + ".train.idx", prefix + ".val.bin", prefix + ".val.idx",
          prefix + ".json"};
}

// --out is a prefix: "DIR/" or "DIR/." would write hidden files named ".train.bin" inside DIR.
void check_out_prefix(const std::string& prefix) {
  ZAYA_CHECK(!prefix.empty(), "--out: an output prefix is required");
  const std::string name = std::filesystem::path(prefix).filename().string();
  ZAYA_CHECK(prefix.back() != '/' && !name.empty() && name != "." && name != "..", "--out ", prefix,
             ": takes a PREFIX such as DIR/name (writes DIR/name.train.bin, DIR/name.train.idx, ... and "
             "DIR/name.json), not a directory");
}

// Existing outputs are an error unless `overwrite`, which removes all of them.
void claim_outputs(const std::string& prefix, bool overwrite) {
  std::error_code ec;
  std::string existing;
  for (const std::string& f : output_files(prefix))
    if (std::filesystem::exists(f, ec)) existing += (existing.empty() ? "" : ", ") + f;
  if (existing.empty()) return;
  ZAYA_CHECK(overwrite, "--out ", prefix, ": ", existing,
             " already exist; pass --overwrite to replace them, or choose another prefix");
  for (const std::string& f : output_files(prefix)) std::filesystem::remove(f, ec);
}

}  // namespace

PrepareStats prepare_dataset(const Tokenizer& tokenizer, const PrepareOptions& options) {
  check_out_prefix(options.out_prefix);
  ZAYA_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, "--val-fraction: ", options.val_fraction,
             " is out of range (expected a fraction in [0, 1))");
  int32_t eos = tokenizer.eos_id();
  ZAYA_CHECK(!options.append_eos || eos >= 0,
             "--append-eos: the tokenizer has no end-of-document token (<eos>, </s>, <|endoftext|>, ...); "
             "pass --append-eos=false to write documents without one");

  auto t0 = std::chrono::steady_clock::now();
  CorpusReader reader(options.corpus);  // the inputs are checked first: a bad one is the error to see
  claim_outputs(options.out_prefix, options.overwrite);
  IndexedDatasetWriter train(options.out_prefix + ".train");
  std::unique_ptr<IndexedDatasetWriter> val;
  if (options.val_fraction > 0) val = std::make_unique<IndexedDatasetWriter>(options.out_prefix + ".val");
  ProgressBar bar("prepare", reader.total_bytes(), options.progress);

  // Batches of documents: read on this thread, encode on all threads, write in order.
  constexpr size_t kBatchDocs = 512, kBatchBytes = 16 << 20;
  PrepareStats stats;
  std::vector<std::string> docs;
  std::vector<std::vector<int32_t>> encoded;
  std::vector<uint32_t> tokens;
  for (;;) {
    docs.clear();
    size_t batch_bytes = 0;
    std::string doc;
    while (docs.size() < kBatchDocs && batch_bytes < kBatchBytes && reader.next(doc)) {
      batch_bytes += doc.size();
      docs.push_back(std::move(doc));
    }
    if (docs.empty()) break;
    encoded.assign(docs.size(), {});
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < docs.size(); i++)
      encoded[i] = tokenizer.encode(docs[i], /*add_special_tokens=*/false);

    for (size_t i = 0; i < docs.size(); i++) {
      tokens.assign(encoded[i].begin(), encoded[i].end());
      if (options.append_eos) tokens.push_back(uint32_t(eos));
      uint64_t doc_index = stats.documents++;
      bool is_val = val && is_validation_document(doc_index, options.seed, options.val_fraction);
      (is_val ? *val : train).add_document(tokens.data(), tokens.size());
      stats.tokens += tokens.size();
      stats.bytes += docs[i].size();
    }
    bar.update(stats.documents, reader.bytes_read());
  }
  bar.finish(stats.documents, reader.bytes_read());
  ZAYA_CHECK(stats.documents > 0, "the corpus is empty: no documents in ", reader.files().size(),
             " input file(s) (empty files and empty JSONL strings are skipped)");
  // An empty split would only fail later, in training, as "dataset has no tokens".
  ZAYA_CHECK(train.tokens() > 0, "the training split is empty: --val-fraction ", options.val_fraction,
             " put all ", stats.documents,
             " document(s) into validation; lower --val-fraction or add "
             "documents");
  ZAYA_CHECK(!val || val->tokens() > 0, "the validation split is empty: --val-fraction ",
             options.val_fraction, " of ", stats.documents,
             " document(s) selected none (each document goes to validation with "
             "that probability); add documents (for plain text, --text-doc-split paragraph makes one per "
             "paragraph), raise --val-fraction, or pass --val-fraction 0 for no validation split");

  stats.train_documents = train.documents();
  stats.train_tokens = train.tokens();
  train.finish();
  if (val) {
    stats.val_documents = val->documents();
    stats.val_tokens = val->tokens();
    val->finish();
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.tokens_per_second = stats.seconds > 0 ? stats.tokens / stats.seconds : 0;

  nlohmann::ordered_json j;
  j["documents"] = stats.documents;
  j["tokens"] = stats.tokens;
  j["bytes"] = stats.bytes;
  j["bytes_per_token"] = stats.tokens ? double(stats.bytes) / double(stats.tokens) : 0.0;
  j["train"] = {{"prefix", options.out_prefix + ".train"},
                {"documents", stats.train_documents},
                {"tokens", stats.train_tokens}};
  if (val)
    j["val"] = {{"prefix", options.out_prefix + ".val"},
                {"documents", stats.val_documents},
                {"tokens", stats.val_tokens}};
  j["seconds"] = stats.seconds;
  j["tokens_per_second"] = stats.tokens_per_second;
  j["token_dtype"] = "uint32 (Megatron dtype code 4 = int32; ids < 2^31)";
  j["eos_id"] = options.append_eos ? eos : -1;
  j["vocab_size"] = tokenizer.vocab_size();
  j["val_fraction"] = options.val_fraction;
  j["seed"] = options.seed;
  j["inputs"] = reader.files();
  std::string json_path = options.out_prefix + ".json";
  std::ofstream out(json_path);
  out << j.dump(2) << "\n";
  ZAYA_CHECK(out.good(), "cannot write '", json_path, "'");
  return stats;
}

}  // namespace zaya::data
