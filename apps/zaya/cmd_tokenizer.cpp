// zaya tokenizer train: learn a byte-level BPE tokenizer from a corpus and write a tokenizer.json.
//   zaya tokenizer train --input FILE|DIR [--input ...] --out tokenizer.json [--vocab-size 8192]
//                        [--format text|jsonl] [--jsonl-field text] [--min-frequency 2]
//                        [--max-bytes N] [--special-tokens "<start_of_turn>,<end_of_turn>"]
// The design (ByteLevel, ids, post-processor) is described in src/tokenizer/bpe_trainer.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "data/corpus.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

int cmd_tokenizer(int argc, char** argv) {
  CLI::App app{"Tokenizer tools"};
  app.require_subcommand(1);
  auto* train = app.add_subcommand("train", "train a byte-level BPE tokenizer.json on a corpus");
  std::vector<std::string> inputs, specials;
  std::string format = "text", field = "text", out;
  zaya::BpeTrainerOptions opt;
  uint64_t max_bytes = 0;
  train->add_option("--input", inputs, "input file or directory (repeatable)")->required();
  train->add_option("--format", format, "text or jsonl")->capture_default_str();
  train->add_option("--jsonl-field", field, "the JSONL field that holds the document")->capture_default_str();
  train->add_option("--vocab-size", opt.vocab_size, "vocabulary size (specials and 256 byte tokens included)")
      ->capture_default_str();
  train->add_option("--min-frequency", opt.min_frequency, "merge only pairs seen at least this often")
      ->capture_default_str();
  train->add_option("--max-bytes", max_bytes, "read at most about this many bytes of the corpus (0: all)")
      ->capture_default_str();
  train->add_option("--special-tokens", specials, "extra special tokens (comma-separated or repeated)")
      ->delimiter(',');
  train->add_option("--out", out, "output tokenizer.json")->required();
  ZAYA_PARSE(app, argc, argv);

  opt.special_tokens = specials;
  zaya::BpeTrainer trainer(opt);
  zaya::data::CorpusOptions corpus;
  corpus.inputs = inputs;
  corpus.format = zaya::data::parse_corpus_format(format);
  corpus.jsonl_field = field;
  zaya::data::CorpusReader reader(corpus);
  std::string doc;
  uint64_t docs = 0;
  while ((max_bytes == 0 || trainer.bytes_added() < max_bytes) && reader.next(doc)) {
    // The last document is cut to the limit, at a character boundary (a cut character would train U+FFFD).
    if (max_bytes && trainer.bytes_added() + doc.size() > max_bytes) {
      doc.resize(max_bytes - trainer.bytes_added());
      doc.resize(zaya::utf8_complete_prefix(doc));
    }
    trainer.add_text(doc);
    docs++;
  }
  std::string json = trainer.train();
  std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    ZAYA_CHECK(f.is_open(), "cannot create '", tmp, "'");
    f << json;
    ZAYA_CHECK(f.good(), "cannot write '", tmp, "'");
  }
  ZAYA_CHECK(std::rename(tmp.c_str(), out.c_str()) == 0, "cannot rename '", tmp, "' to '", out, "'");
  // Check the file loads as the project reads tokenizers, before reporting success.
  zaya::Tokenizer tok = zaya::Tokenizer::load(out);
  const zaya::BpeTrainerStats& s = trainer.stats();
  std::printf("read %llu documents, %.2f MB, %llu words (%llu distinct)\n", (unsigned long long)docs,
              s.bytes / 1e6, (unsigned long long)s.words, (unsigned long long)s.unique_words);
  std::printf("vocab %d (%d merges) in %.2f s -> %s\n", tok.vocab_size(), s.merges, s.seconds, out.c_str());
  if (s.vocab_size < opt.vocab_size)
    std::printf("note: stopped at %d tokens: no pair is seen %lld times or more (--min-frequency)\n",
                s.vocab_size, (long long)opt.min_frequency);
  return 0;
}

zaya::app::Register reg("tokenizer", "tokenizer tools: zaya tokenizer train (byte-level BPE)", cmd_tokenizer);

}  // namespace
