// zaya eval ppl: perplexity with lm-eval's loglikelihood_rolling semantics (src/eval/perplexity.h) on text
// files or `zaya data prepare` shards, for any weight format the loader reads. One JSON line on stdout.
//
// Input: a text FILE (one document), a DIR (every regular file a document, in name order), or a
// DATASET_PREFIX (PREFIX.idx/.bin: every stored sequence a document, its tokens as stored; word and byte
// counts from its detokenized text when a tokenizer is found). Text is encoded without special tokens: the
// BOS token is the prefix every document's first window starts from (lm-eval's prefix token).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "command.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/quant.h"
#include "data/corpus.h"
#include "data/indexed_dataset.h"
#include "eval/cloze.h"
#include "eval/perplexity.h"
#include "eval_tasks.h"
#include "load_flags.h"
#include "model/zaya.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

struct Doc {
  std::vector<int32_t> tokens;
  int64_t words = 0, bytes = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int cmd_eval_ppl(const std::string& model_dir, const std::string& input, const std::string& tokenizer_path,
                 int64_t context, int64_t batch, int64_t limit, const std::string& dtype,
                 const zaya::app::LoadFlags& sem) {
  const auto t0 = std::chrono::steady_clock::now();
  zaya::LoadOptions lo;
  lo.compute = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  sem.apply(lo);
  const zaya::ZayaModel model = zaya::ZayaModel::load(model_dir, lo);
  if (context <= 0) context = std::min<int64_t>(model.cfg.max_position_embeddings, 2048);
  std::unique_ptr<zaya::Tokenizer> tok;
  const std::string tpath = tokenizer_path.empty() ? model_dir + "/tokenizer.json" : tokenizer_path;
  if (fs::is_regular_file(tpath)) tok = std::make_unique<zaya::Tokenizer>(zaya::Tokenizer::load(tpath));

  std::vector<Doc> docs;
  auto add_text = [&](const std::string& text, const std::string& where) {
    ZAYA_CHECK(tok, where, ": text input needs a tokenizer (--tokenizer, or MODEL/tokenizer.json)");
    Doc d;
    d.tokens = tok->encode(text, /*add_special_tokens=*/false);
    d.words = zaya::eval::count_words(text);
    d.bytes = int64_t(text.size());
    docs.push_back(std::move(d));
  };
  if (fs::is_regular_file(input)) {
    add_text(read_file(input), input);
  } else if (fs::is_directory(input)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(input))
      if (e.is_regular_file()) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    ZAYA_CHECK(!files.empty(), input, ": no files");
    for (const auto& f : files) add_text(read_file(f), f);
  } else {
    ZAYA_CHECK(fs::is_regular_file(input + ".idx"), input,
               ": not a text file, a directory or a dataset prefix (no ", input, ".idx)");
    auto ds = zaya::data::IndexedDataset::open(input);
    for (size_t s = 0; s < ds->num_sequences(); s++) {
      std::vector<uint32_t> raw = ds->sequence(s);
      Doc d;
      d.tokens.assign(raw.begin(), raw.end());
      if (tok) {
        const std::string text = tok->decode(d.tokens, /*skip_special_tokens=*/true);
        d.words = zaya::eval::count_words(text);
        d.bytes = int64_t(text.size());
      }
      docs.push_back(std::move(d));
    }
  }
  if (limit > 0 && int64_t(docs.size()) > limit) docs.resize(size_t(limit));
  for (const Doc& d : docs)
    for (int32_t id : d.tokens)
      ZAYA_CHECK(id >= 0 && id < model.cfg.vocab_size, input, ": token id ", id,
                 " is outside the model's vocabulary [0, ", model.cfg.vocab_size,
                 ") (a tokenizer of another model?)");

  std::vector<zaya::eval::RollingWindow> windows;
  std::vector<size_t> doc_of;
  for (size_t i = 0; i < docs.size(); i++) {
    for (auto& w : zaya::eval::rolling_windows(docs[i].tokens, int32_t(model.cfg.bos_token_id), context)) {
      windows.push_back(std::move(w));
      doc_of.push_back(i);
    }
  }
  ZAYA_CHECK(!windows.empty(), input, ": no tokens to score (empty documents)");
  auto last = std::chrono::steady_clock::now();
  const std::vector<double> ll =
      zaya::eval::score_windows(model, windows, batch, [&](size_t done, size_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (std::chrono::duration<double>(now - last).count() < 2.0 && done < total) return;
        last = now;
        const double el = std::chrono::duration<double>(now - t0).count();
        std::fprintf(stderr, "eval ppl: %zu/%zu windows, %.0f s, ETA %.0f s\n", done, total, el,
                     el / double(done) * double(total - done));
      });
  zaya::eval::PerplexityTotals tot;
  for (size_t i = 0; i < windows.size(); i++) tot.loglikelihood += ll[i];
  for (const Doc& d : docs) {
    tot.documents++;
    tot.tokens += int64_t(d.tokens.size());
    tot.words += d.words;
    tot.bytes += d.bytes;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const zaya::DType experts = model.w.layers[0].experts_gate_up.dtype;
  nlohmann::json j;
  j["task"] = "ppl";
  j["model"] = model_dir;
  j["input"] = input;
  j["weights"] = zaya::is_quantized(experts) ? zaya::quant_scheme_name(experts) : zaya::dtype_name(experts);
  j["compute"] = dtype;
  j["context"] = context;
  j["documents"] = tot.documents;
  j["tokens"] = tot.tokens;
  j["words"] = tot.words;
  j["bytes"] = tot.bytes;
  j["loglikelihood"] = tot.loglikelihood;
  j["token_perplexity"] = tot.token_perplexity();
  if (tot.words > 0) j["word_perplexity"] = tot.word_perplexity();
  if (tot.bytes > 0) {
    j["byte_perplexity"] = tot.byte_perplexity();
    j["bits_per_byte"] = tot.bits_per_byte();
  }
  j["seconds"] = secs;
  j["tokens_per_s"] = double(tot.tokens) / secs;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// zaya eval cloze: a cloze task (eval/cloze.h) from held-out text — a text FILE or DIR (data/corpus.h), or a
// DATASET_PREFIX whose sequences are decoded with the tokenizer — written as OUT (generic task JSONL).
int cmd_eval_cloze(const std::string& input, const std::string& tokenizer_path, const std::string& out,
                   const zaya::eval::ClozeOptions& o) {
  std::vector<std::string> docs;
  if (fs::exists(input)) {
    zaya::data::CorpusOptions co;
    co.inputs = {input};
    zaya::data::CorpusReader reader(co);
    for (std::string d; reader.next(d);) docs.push_back(d);
  } else {
    ZAYA_CHECK(fs::is_regular_file(input + ".idx"), input,
               ": not a text file, a directory or a dataset prefix (no ", input, ".idx)");
    ZAYA_CHECK(!tokenizer_path.empty(), input, ": a dataset prefix needs --tokenizer to be read as text");
    const zaya::Tokenizer tok = zaya::Tokenizer::load(tokenizer_path);
    auto ds = zaya::data::IndexedDataset::open(input);
    for (size_t s = 0; s < ds->num_sequences(); s++) {
      std::vector<uint32_t> raw = ds->sequence(s);
      docs.push_back(tok.decode(std::vector<int32_t>(raw.begin(), raw.end()), /*skip_special_tokens=*/true));
    }
  }
  const std::vector<nlohmann::json> items = zaya::eval::build_cloze_items(docs, o);
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  ZAYA_CHECK(f.good(), out, ": cannot write");
  for (const auto& j : items) f << j.dump() << "\n";
  ZAYA_CHECK(f.good(), out, ": write failed");
  std::fprintf(stderr, "eval cloze: %zu items of %lld choices from %zu documents -> %s\n", items.size(),
               static_cast<long long>(o.choices), docs.size(), out.c_str());
  return 0;
}

int cmd_eval(int argc, char** argv) {
  CLI::App app{
      "Evaluate a model the way lm-evaluation-harness does: rolling perplexity, multiple-choice, "
      "loglikelihood "
      "and generative tasks, comparison tables"};
  app.require_subcommand(1);
  auto* ppl =
      app.add_subcommand("ppl", "perplexity (token, word, byte; bits per byte) of text or token shards");
  std::string model_dir, input, tokenizer, dtype = "fp32";
  int64_t context = 0, batch = 4, limit = 0;
  zaya::app::LoadFlags sem;
  ppl->add_option("--model", model_dir, "HF checkpoint directory (float or quantized)")->required();
  ppl->add_option("--input", input, "text FILE, DIR of text files, or DATASET_PREFIX (zaya data prepare)")
      ->required();
  ppl->add_option("--tokenizer", tokenizer, "tokenizer.json (default: MODEL/tokenizer.json)");
  ppl->add_option("--context", context, "window length (default: min(max_position_embeddings, 2048))");
  ppl->add_option("--batch", batch, "windows per forward")->check(CLI::PositiveNumber);
  ppl->add_option("--limit", limit, "only the first N documents");
  ppl->add_option("--dtype", dtype, "GEMM compute dtype of the float matrices")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  zaya::app::add_load_flags(*ppl, sem);

  auto* run = app.add_subcommand(
      "run",
      "lm-eval tasks (hellaswag, arc_easy, arc_challenge, piqa, winogrande, mmlu, lambada_openai, gsm8k, "
      "or a generic JSONL task) from local files; results JSON in lm-eval's layout");
  zaya::app::EvalRunOptions ro;
  std::string tasks;
  zaya::app::LoadFlags run_sem;
  bool no_share = false;
  run->add_option("--model", ro.model_dir, "HF checkpoint directory (float or quantized)")->required();
  run->add_option("--tasks", tasks, "comma-separated task names (docs/eval.md)")->required();
  run->add_option("--data-dir", ro.data_dir, "DATA_DIR/TASK/SPLIT.jsonl (docs/eval.md: layout)")->required();
  run->add_option("--num-fewshot", ro.num_fewshot,
                  "few-shot examples (default: each task's, MMLU 5, GSM8K 5)");
  run->add_option("--limit", ro.limit, "only the first N items of each task");
  run->add_option("--batch-tokens", ro.batch_tokens, "tokens per forward")->check(CLI::PositiveNumber);
  run->add_option("--context", ro.context, "context length (default: min(max_position_embeddings, 2048))");
  run->add_option("--seed", ro.seed, "few-shot sampling seed (lm-eval's fewshot_random_seed)")
      ->capture_default_str();
  run->add_option("--bootstrap-iters", ro.bootstrap_iters, "resamples for the perplexity stderr (0: N/A)")
      ->capture_default_str();
  run->add_option("--max-gen-tokens", ro.max_gen_tokens, "generative tasks: new tokens at most")
      ->capture_default_str();
  run->add_flag("--no-shared-context", no_share,
                "score every choice as its own sequence (lm-eval's way; the default runs a question's "
                "context once for all its choices)");
  run->add_option("--output", ro.output, "write the results JSON here");
  run->add_option(
      "--log-samples", ro.log_samples,
      "write every loglikelihood request (text, tokens, loglikelihood, greedy flag) as JSONL here");
  run->add_option("--tokenizer", ro.tokenizer, "tokenizer.json (default: MODEL/tokenizer.json)");
  run->add_option("--dtype", ro.dtype, "GEMM compute dtype of the float matrices")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  zaya::app::add_load_flags(*run, run_sem);

  auto* table =
      app.add_subcommand("table", "a markdown table of results files: models as columns, tasks as rows");
  std::vector<std::string> files;
  table->add_option("files", files, "RESULTS.json files (zaya eval run --output, or lm-eval's)")->required();

  auto* cloze = app.add_subcommand(
      "cloze",
      "a cloze task from held-out text (the next word among common words of the text), as generic JSONL");
  std::string c_input, c_tokenizer, c_out;
  zaya::eval::ClozeOptions co;
  cloze->add_option("--input", c_input, "text FILE, DIR of text files, or DATASET_PREFIX (with --tokenizer)")
      ->required();
  cloze->add_option("--tokenizer", c_tokenizer, "tokenizer.json to decode a dataset prefix");
  cloze->add_option("--out", c_out, "the task file, e.g. DATA_DIR/brown_cloze/test.jsonl")->required();
  cloze->add_option("--items", co.items, "items")->check(CLI::PositiveNumber)->capture_default_str();
  cloze->add_option("--choices", co.choices, "choices per item (chance = 1 / choices)")
      ->check(CLI::Range(2, 26))
      ->capture_default_str();
  cloze->add_option("--context-words", co.context_words, "words of context before the blank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cloze->add_option("--min-count", co.min_count, "a candidate word occurs at least this often in the text")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cloze->add_option("--seed", co.seed, "item and distractor draw")->capture_default_str();

  ZAYA_PARSE(app, argc, argv);
  if (cloze->parsed()) return cmd_eval_cloze(c_input, c_tokenizer, c_out, co);
  if (ppl->parsed()) return cmd_eval_ppl(model_dir, input, tokenizer, context, batch, limit, dtype, sem);
  if (run->parsed()) {
    std::stringstream ss(tasks);
    for (std::string t; std::getline(ss, t, ',');)
      if (!t.empty()) ro.tasks.push_back(t);
    ro.share_context = !no_share;
    ro.semantics = run_sem.get();
    ro.in_memory = run_sem.no_mmap;
    return zaya::app::eval_run(ro);
  }
  if (table->parsed()) return zaya::app::eval_table(files);
  return 2;
}

zaya::app::Register reg("eval", "evaluate a model (ppl, run: lm-eval tasks, table, cloze: a task from text)",
                        cmd_eval);

}  // namespace
