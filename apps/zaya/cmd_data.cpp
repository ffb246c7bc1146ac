// zaya data: prepare training data.
//   zaya data prepare --input FILE|DIR [--input ...] --tokenizer tokenizer.json --out PREFIX
//                     [--format text|jsonl] [--jsonl-field text] [--text-doc-split file|paragraph]
//                     [--val-fraction 0.01] [--seed 1234] [--append-eos=true|false] [--no-progress]
//                     [--overwrite]
//   -> PREFIX.train.bin/.idx, PREFIX.val.bin/.idx (Megatron layout, 4-byte tokens) and PREFIX.json; existing
//   ones only with --overwrite.
//   zaya data info PREFIX: documents, tokens and the first tokens of a .bin/.idx pair.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/indexed_dataset.h"
#include "data/prepare.h"
#include "tokenizer/tokenizer.h"

namespace {

int cmd_data(int argc, char** argv) {
  CLI::App app{"Prepare tokenized training data (Megatron .bin/.idx shards)"};
  app.require_subcommand(1);

  auto* prepare = app.add_subcommand("prepare", "tokenize text/JSONL files into .bin/.idx shards");
  std::vector<std::string> inputs;
  std::string format = "text", field = "text", split = "file", tokenizer_path, out;
  double val_fraction = 0.0;
  uint64_t seed = 1234;
  bool append_eos = true, no_progress = false, overwrite = false;
  int threads = 0;
  prepare->add_option("--input", inputs, "input file or directory (repeatable)")->required();
  prepare->add_option("--format", format, "text or jsonl")->capture_default_str();
  prepare->add_option("--jsonl-field", field, "the JSONL field that holds the document")
      ->capture_default_str();
  prepare->add_option("--text-doc-split", split, "plain text: one document per file or per paragraph")
      ->capture_default_str();
  prepare->add_option("--tokenizer", tokenizer_path, "tokenizer.json")->required();
  prepare
      ->add_option("--out", out,
                   "output PREFIX such as DIR/name (writes PREFIX.train.bin/.idx, PREFIX.val.bin/.idx, "
                   "PREFIX.json)")
      ->required();
  prepare->add_option("--val-fraction", val_fraction, "fraction of documents held out for validation")
      ->capture_default_str();
  prepare->add_option("--seed", seed, "seed of the validation split")->capture_default_str();
  prepare->add_option("--append-eos", append_eos, "append the tokenizer's eos id after each document")
      ->capture_default_str();
  prepare->add_option("--threads", threads, "tokenizer threads (default: OMP_NUM_THREADS / all cores)");
  prepare->add_flag("--no-progress", no_progress, "no progress bar on stderr");
  prepare->add_flag("--overwrite", overwrite,
                    "replace existing PREFIX.* outputs (all of them are removed first)");

  auto* info = app.add_subcommand("info", "print the size of a .bin/.idx pair");
  std::string info_prefix;
  int show = 16;
  info->add_option("prefix", info_prefix, "PREFIX of PREFIX.bin/PREFIX.idx")->required();
  info->add_option("--show", show, "print the first tokens of this many documents")->capture_default_str();

  ZAYA_PARSE(app, argc, argv);

  if (*prepare) {
    zaya::data::PrepareOptions opt;
    opt.corpus.inputs = inputs;
    opt.corpus.format = zaya::data::parse_corpus_format(format);
    opt.corpus.jsonl_field = field;
    opt.corpus.text_doc_split = zaya::data::parse_text_doc_split(split);
    opt.out_prefix = out;
    opt.val_fraction = val_fraction;
    opt.seed = seed;
    opt.append_eos = append_eos;
    opt.progress = !no_progress;
    opt.overwrite = overwrite;
    if (threads > 0) zaya::set_num_threads(threads);
    zaya::Tokenizer tok = zaya::Tokenizer::load(tokenizer_path);
    zaya::data::PrepareStats s = zaya::data::prepare_dataset(tok, opt);
    std::printf("documents %llu (train %llu, val %llu)\ntokens %llu (train %llu, val %llu)\n",
                (unsigned long long)s.documents, (unsigned long long)s.train_documents,
                (unsigned long long)s.val_documents, (unsigned long long)s.tokens,
                (unsigned long long)s.train_tokens, (unsigned long long)s.val_tokens);
    std::printf(
        "bytes %llu (%.2f bytes/token)\ntime %.2f s, %.0f tokens/s\nwrote %s.train.{bin,idx}%s, %s.json\n",
        (unsigned long long)s.bytes, s.tokens ? double(s.bytes) / double(s.tokens) : 0.0, s.seconds,
        s.tokens_per_second, out.c_str(), val_fraction > 0 ? (" " + out + ".val.{bin,idx}").c_str() : "",
        out.c_str());
    return 0;
  }
  auto ds = zaya::data::IndexedDataset::open(info_prefix);
  std::printf("%s: %zu documents, %llu tokens, dtype code %d\n", info_prefix.c_str(), ds->num_sequences(),
              (unsigned long long)ds->num_tokens(), int(ds->dtype_code()));
  for (size_t i = 0; i < ds->num_sequences() && int(i) < show; i++) {
    std::vector<uint32_t> t = ds->sequence(i);
    std::printf("  [%zu] %zu tokens:", i, t.size());
    for (size_t k = 0; k < t.size() && k < 16; k++) std::printf(" %u", t[k]);
    std::printf("%s\n", t.size() > 16 ? " ..." : "");
  }
  return 0;
}

zaya::app::Register reg("data", "prepare tokenized training data: zaya data prepare|info", cmd_data);

}  // namespace
