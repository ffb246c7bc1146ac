// `zaya data prepare`: a text corpus -> tokenized Megatron .bin/.idx shards (see indexed_dataset.h).
//   PREFIX.train.bin/.idx  the training documents, in corpus order
//   PREFIX.val.bin/.idx    the held-out documents (written when val_fraction > 0)
//   PREFIX.json            the statistics of the run (documents, tokens, bytes, tokens/s, options)
// Each document is encoded without special tokens, then (append_eos) the tokenizer's eos id is appended
// as the end-of-document token. Document d (0-based, in corpus order) goes to validation when
// hash(seed, d) / 2^64 < val_fraction: the split depends only on the seed and the document order, never
// on thread count or batch boundaries. Tokenization runs on OpenMP threads over batches of documents;
// documents are written in corpus order, so the output is identical for any thread count.
// Existing output files of PREFIX are never overwritten by accident (PrepareOptions::overwrite), and a
// split that comes out empty is an error: a training run on it would fail much later and less clearly.
#pragma once

#include <cstdint>
#include <string>

#include "data/corpus.h"
#include "tokenizer/tokenizer.h"

namespace zaya::data {

struct PrepareOptions {
  CorpusOptions corpus;
  std::string out_prefix;
  double val_fraction = 0.0;  // in [0, 1)
  uint64_t seed = 1234;
  bool append_eos = true;
  bool progress = true;  // the progress bar on stderr
  // Replace existing PREFIX.{train,val}.{bin,idx} / PREFIX.json (all of them are removed first, so that no
  // stale validation split stays beside a new training split); otherwise their existence is an error.
  bool overwrite = false;
};

struct PrepareStats {
  uint64_t documents = 0, tokens = 0, bytes = 0;  // everything read (train + val)
  uint64_t train_documents = 0, train_tokens = 0;
  uint64_t val_documents = 0, val_tokens = 0;
  double seconds = 0, tokens_per_second = 0;
};

// True when document `doc_index` belongs to the validation split.
bool is_validation_document(uint64_t doc_index, uint64_t seed, double val_fraction);

// Runs the whole job and writes the files above. Throws zaya::Error for bad options (an out_prefix that ends
// in '/' or names no file: it is a PREFIX like DIR/name), existing outputs without `overwrite`, unreadable
// or malformed input, an empty corpus, an empty training or validation split, a tokenizer without an eos
// token when append_eos is set, or I/O errors. An error before the end leaves no output files (the shards are
// renamed into place at the end).
PrepareStats prepare_dataset(const Tokenizer& tokenizer, const PrepareOptions& options);

}  // namespace zaya::data
