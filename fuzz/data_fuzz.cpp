// Fuzz target for the data pipeline's untrusted inputs.
// 1. .idx bytes: parse_index either throws zaya::Error or returns an index whose every sequence lies
//    inside the data file, with a doc_idx in order (the reader then never reads out of bounds).
// 2. The same bytes as a JSONL file and as a paragraph-split text file: every document comes back or a
//    zaya::Error names the line.
// 3. Training text: a tiny BPE trained on the input bytes must write a tokenizer.json that Tokenizer
//    loads and that round-trips the same text (repaired to valid UTF-8, as encode reads it).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/corpus.h"
#include "data/indexed_dataset.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint64_t bin_size = 64;
  try {
    zaya::data::IndexContents index = zaya::data::parse_index(data, size, bin_size, "fuzz.idx");
    size_t item = index.dtype_code == zaya::data::kDTypeUInt16 ? 2 : 4;
    for (size_t i = 0; i < index.sizes.size(); i++)
      ZAYA_ASSERT(index.sizes[i] >= 0 && index.pointers[i] >= 0 &&
                      uint64_t(index.pointers[i]) + uint64_t(index.sizes[i]) * item <= bin_size,
                  "a validated index stays inside the data file");
    for (size_t i = 1; i < index.doc_idx.size(); i++)
      ZAYA_ASSERT(index.doc_idx[i - 1] <= index.doc_idx[i], "a validated doc_idx is in order");
    std::string again = zaya::data::serialize_index(index);
    ZAYA_ASSERT(again == std::string(reinterpret_cast<const char*>(data), size), "serialize inverts parse");
  } catch (const zaya::Error&) {
  }

  std::string text(reinterpret_cast<const char*>(data), size);
  static const std::string corpus_path =
      (std::filesystem::temp_directory_path() / ("zaya_data_fuzz_" + std::to_string(::getpid()) + ".txt"))
          .string();
  if (FILE* f = std::fopen(corpus_path.c_str(), "wb")) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    for (auto format : {zaya::data::CorpusFormat::kJsonl, zaya::data::CorpusFormat::kText}) {
      zaya::data::CorpusOptions opt;
      opt.inputs = {corpus_path};
      opt.format = format;
      opt.text_doc_split = zaya::data::TextDocSplit::kParagraph;
      try {
        zaya::data::CorpusReader reader(opt);
        std::string doc;
        size_t bytes = 0;
        while (reader.next(doc)) bytes += doc.size();
        ZAYA_ASSERT(format == zaya::data::CorpusFormat::kJsonl || bytes <= text.size(),
                    "paragraphs come from the file");
      } catch (const zaya::Error&) {
      }
    }
    std::remove(corpus_path.c_str());
  }
  zaya::BpeTrainerOptions opt;
  opt.vocab_size = 300;
  opt.min_frequency = 1;
  zaya::BpeTrainer trainer(opt);
  trainer.add_text(text);
  std::string json;
  try {
    json = trainer.train();
  } catch (const zaya::Error&) {
    ZAYA_ASSERT(size == 0, "only an empty corpus fails to train");
    return 0;
  }
  zaya::Tokenizer tok = zaya::Tokenizer::from_json(json, "fuzz-tokenizer.json");
  ZAYA_ASSERT(tok.decode(tok.encode(text, false)) == zaya::utf8_repair(text),
              "trained tokenizer round-trips");
  return 0;
}

extern "C" size_t LLVMFuzzerSeedCount() {
  return 3;
}

extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  std::string s;
  if (i == 0) {
    zaya::data::IndexContents index;
    index.dtype_code = zaya::data::kDTypeInt32;
    index.sizes = {2, 0, 5};
    index.pointers = {0, 8, 8};
    index.doc_idx = {0, 1, 2, 3};
    s = zaya::data::serialize_index(index);
  } else if (i == 1) {
    zaya::data::IndexContents index;
    index.dtype_code = zaya::data::kDTypeUInt16;
    index.sizes = {3, 4};
    index.pointers = {0, 6};
    index.doc_idx = {0, 2};
    s = zaya::data::serialize_index(index);
  } else if (i == 2) {
    s = "{\"text\": \"a doc\"}\n\n{\"text\": \"caf\\u00e9\", \"n\": [1, {\"x\": null}]}\r\n{\"text\": 5}\n";
  } else {
    s = "The quick brown fox, the lazy dog.\n\tCafé ☃ 🙂 <eos> aaaa 1234\x01\xff";
  }
  return std::vector<uint8_t>(s.begin(), s.end());
}
