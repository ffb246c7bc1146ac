// Tokenizer::load / from_json: validates a tokenizer.json and builds the pipeline.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/json_field.h"
#include "tokenizer/tokenizer_impl.h"

namespace zaya {
namespace {

// model.vocab: {"token": id, ...} with ids exactly 0..N-1. extra_ids: room for the added tokens.
void load_vocab(const JsonField& vocab, size_t extra_ids, Tokenizer::Impl& m) {
  if (!vocab.raw().is_object())
    vocab.fail(str_cat("expected an object {\"token\": id}, got ", vocab.type_name()));
  size_t n = vocab.raw().size();
  if (n == 0) vocab.fail("the vocabulary is empty");
  if (n + extra_ids > size_t(INT32_MAX)) vocab.fail("the vocabulary is too large");
  m.tokens.resize(n + extra_ids);
  for (const auto& [token, value] : vocab.raw().items()) {
    int64_t id = -1;
    if (value.is_number_integer()) id = value.get<int64_t>();
    if (!value.is_number_integer() || id < 0 || id >= int64_t(n) || m.tokens.has_id(int32_t(id))) {
      JsonField id_field(value, vocab.file(), vocab.path() + "[\"" + token + "\"]");
      id = id_field.integer();  // throws for a non-integer
      if (id < 0 || id >= int64_t(n)) {
        id_field.fail(str_cat("id ", id, " is out of range [0, ", n, ") (ids must be 0..N-1 for N tokens)"));
      }
      id_field.fail(str_cat("duplicate id ", id, " (also the id of \"", m.tokens.token(int32_t(id)), "\")"));
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
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(str_cat(name, ": not valid JSON (", e.what(), ")"));
  }
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
  load_vocab(model.at("vocab"), n_added, *m);
  size_t n_vocab = model.at("vocab").raw().size();
  for (auto* flags : {&m->special, &m->added, &m->lstrip, &m->rstrip}) flags->assign(n_vocab + n_added, 0);
  if (added)
    load_added_tokens(*added, n_vocab, *m);
  else
    m->tokens.resize(n_vocab);
  for (auto* flags : {&m->special, &m->added, &m->lstrip, &m->rstrip}) flags->resize(m->tokens.size());
  m->model = std::make_unique<BpeModel>(model, m->tokens);

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
