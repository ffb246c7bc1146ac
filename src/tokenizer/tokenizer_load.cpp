// Tokenizer::load / from_json: validates a tokenizer.json and builds the pipeline.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/json_field.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"

namespace zaya {
namespace {

using VocabEntries = std::vector<std::pair<std::string, int64_t>>;
using MergePairs = std::vector<std::pair<std::string, std::string>>;

// model.vocab from the document (when it was not streamed): {"token": id, ...}, type-checked.
VocabEntries read_vocab(const JsonField& vocab) {
  if (!vocab.raw().is_object())
    vocab.fail(str_cat("expected an object {\"token\": id}, got ", vocab.type_name()));
  VocabEntries entries;
  entries.reserve(vocab.raw().size());
  for (const auto& [token, value] : vocab.raw().items()) {
    entries.emplace_back(token,
                         JsonField(value, vocab.file(), vocab.path() + "[\"" + token + "\"]").integer());
  }
  return entries;
}

// model.merges from the document (when it was not streamed): ["left", "right"] or "left right" entries.
MergePairs read_merges(const JsonField& merges) {
  MergePairs pairs;
  size_t n = merges.array_size();
  pairs.reserve(n);
  for (size_t i = 0; i < n; i++) {
    JsonField merge = merges.at(i);
    if (merge.raw().is_string()) {
      std::string text = merge.str();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        merge.fail(str_cat("expected \"left right\" (one space), got \"", text, "\""));
      }
      pairs.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.raw().is_array()) {
      if (merge.array_size() != 2)
        merge.fail(str_cat("expected [left, right], got ", merge.array_size(), " elements"));
      pairs.emplace_back(merge.at(0).str(), merge.at(1).str());
    } else {
      merge.fail(str_cat("expected [\"left\", \"right\"] or \"left right\", got ", merge.type_name()));
    }
  }
  return pairs;
}

// Checks that the ids are exactly 0..N-1 and fills the token table (with room for extra_ids more).
void load_vocab(const VocabEntries& entries, const std::string& file, size_t extra_ids, Tokenizer::Impl& m) {
  size_t n = entries.size();
  if (n == 0) fail_field(file, "model.vocab", "the vocabulary is empty");
  if (n + extra_ids > size_t(INT32_MAX)) fail_field(file, "model.vocab", "the vocabulary is too large");
  m.tokens.resize(n + extra_ids);
  for (const auto& [token, id] : entries) {
    if (id < 0 || id >= int64_t(n) || m.tokens.has_id(int32_t(id))) {
      std::string path = "model.vocab[\"" + token + "\"]";
      if (id < 0 || id >= int64_t(n)) {
        fail_field(file, path,
                   str_cat("id ", id, " is out of range [0, ", n, ") (ids must be 0..N-1 for N tokens)"));
      }
      fail_field(file, path,
                 str_cat("duplicate id ", id, " (also the id of \"", m.tokens.token(int32_t(id)), "\")"));
    }
    m.tokens.set(int32_t(id), token);
  }
}

// added_tokens: [{"id", "content", "special", "lstrip", "rstrip", ...}]. An added token either repeats a
// vocab token (same id, same content) or takes a new id past the vocab; new ids must leave no gap.
void load_added_tokens(const JsonField& list, size_t n_vocab, Tokenizer::Impl& m) {
  size_t count = list.array_size();
  size_t n_total = n_vocab;
  for (size_t i = 0; i < count; i++) {
    JsonField entry = list.at(i);
    std::string content = entry.at("content").str();
    if (content.empty()) entry.at("content").fail("an added token must not be empty");
    JsonField id_field = entry.at("id");
    int64_t id = id_field.integer();
    if (id < 0 || id >= int64_t(n_vocab + count)) {
      id_field.fail(str_cat("id ", id, " is out of range [0, ", n_vocab + count, ")"));
    }
    if (m.tokens.has_id(int32_t(id)) && m.tokens.token(int32_t(id)) != content) {
      id_field.fail(str_cat("id ", id, " is already the token \"", m.tokens.token(int32_t(id)), "\", not \"",
                            content, "\""));
    }
    int32_t known = m.tokens.find(content);
    if (known >= 0 && known != id) {
      entry.at("content").fail(str_cat("\"", content, "\" already has id ", known, ", not ", id));
    }
    size_t slot = size_t(id);
    if (!m.tokens.has_id(int32_t(id))) m.tokens.set(int32_t(id), content);
    n_total = std::max(n_total, slot + 1);
    m.special[slot] = entry.bool_or("special", false);
    m.added[slot] = 1;
    m.lstrip[slot] = entry.bool_or("lstrip", false);
    m.rstrip[slot] = entry.bool_or("rstrip", false);
    entry.bool_or("normalized", false);  // type checks only: added tokens are matched on raw text
    entry.bool_or("single_word", false);
    m.added_matcher.add(content, int32_t(id));
  }
  for (size_t id = n_vocab; id < n_total; id++) {
    if (!m.tokens.has_id(int32_t(id))) {
      list.fail(str_cat("no token has id ", id, " (ids past model.vocab must be contiguous)"));
    }
  }
  m.tokens.resize(n_total);
}

int32_t first_known(const Tokenizer::Impl& m, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    int32_t id = m.tokens.find(name);
    if (id >= 0) return id;
  }
  return -1;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZAYA_CHECK(in.good(), "cannot open tokenizer file '", path, "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  ZAYA_CHECK(!in.bad(), "cannot read tokenizer file '", path, "'");
  return from_json(buffer.str(), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& name) {
  TokenizerJson parsed = read_tokenizer_json(json_text, name);
  const nlohmann::json& doc = parsed.doc;
  JsonField root(doc, name, "");
  if (!doc.is_object()) root.fail(str_cat("expected a JSON object, got ", root.type_name()));

  static std::atomic<uint64_t> next_serial{1};
  auto m = std::make_shared<Impl>();
  m->name = name;
  m->serial = next_serial++;
  JsonField model = root.at("model");
  if (!model.raw().is_object()) model.fail(str_cat("expected an object, got ", model.type_name()));
  std::string type = model.find("type") ? model.at("type").str() : (model.find("merges") ? "BPE" : "");
  if (type != "BPE") {
    model.fail(type.empty() ? std::string("has no \"type\" (only BPE models are supported)")
                            : str_cat("unsupported model type \"", type, "\" (only BPE is supported)"));
  }
  std::optional<JsonField> added = root.find("added_tokens");
  size_t n_added = added ? added->array_size() : 0;
  JsonField vocab_field = model.at("vocab"), merges_field = model.at("merges");  // both required
  VocabEntries vocab = parsed.vocab_streamed ? std::move(parsed.vocab) : read_vocab(vocab_field);
  load_vocab(vocab, name, n_added, *m);
  size_t n_vocab = vocab.size();
  VocabEntries().swap(vocab);
  for (auto* flags : {&m->special, &m->added, &m->lstrip, &m->rstrip}) flags->assign(n_vocab + n_added, 0);
  if (added)
    load_added_tokens(*added, n_vocab, *m);
  else
    m->tokens.resize(n_vocab);
  for (auto* flags : {&m->special, &m->added, &m->lstrip, &m->rstrip}) flags->resize(m->tokens.size());
  MergePairs merges = parsed.merges_streamed ? std::move(parsed.merges) : read_merges(merges_field);
  m->model = std::make_unique<BpeModel>(model, merges, m->tokens);

  if (auto f = root.find("normalizer")) m->normalizer = make_normalizer(*f);
  if (auto f = root.find("pre_tokenizer")) m->pre_tokenizer = make_pre_tokenizer(*f);
  if (auto f = root.find("post_processor")) {
    const Impl* impl = m.get();
    auto token_id = [impl](const std::string& token) { return impl->tokens.find(token); };
    m->post_processor = make_post_processor(*f, token_id, int32_t(m->tokens.size()));
  }
  if (auto f = root.find("decoder")) m->decoder = make_decoder(*f);

  m->bos = m->post_processor ? m->post_processor->first_prefix_id() : -1;
  if (m->bos < 0) m->bos = first_known(*m, {"<bos>", "<s>", "<|begin_of_text|>"});
  m->eos = first_known(*m, {"<eos>", "</s>", "<|end_of_text|>", "<|endoftext|>"});
  m->pad = first_known(*m, {"<pad>", "<|pad|>", "[PAD]"});
  return Tokenizer(std::move(m));
}

}  // namespace zaya
