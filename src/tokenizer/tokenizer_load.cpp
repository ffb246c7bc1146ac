// Tokenizer::load / from_json: validates a tokenizer.json and builds the pipeline.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/json_field.h"
#include "tokenizer/tokenizer_impl.h"

namespace zaya {
namespace {

// model.vocab: {"token": id, ...} with ids exactly 0..N-1.
void load_vocab(const JsonField& vocab, Tokenizer::Impl& m) {
  if (!vocab.raw().is_object())
    vocab.fail(str_cat("expected an object {\"token\": id}, got ", vocab.type_name()));
  size_t n = vocab.raw().size();
  if (n == 0) vocab.fail("the vocabulary is empty");
  if (n > size_t(INT32_MAX)) vocab.fail("the vocabulary is too large");
  m.tokens.assign(n, std::string());
  std::vector<uint8_t> seen(n, 0);
  m.token_ids.reserve(n);
  for (const auto& [token, value] : vocab.raw().items()) {
    JsonField id_field(value, vocab.file(), vocab.path() + "[\"" + token + "\"]");
    int64_t id = id_field.integer();
    if (id < 0 || id >= int64_t(n)) {
      id_field.fail(str_cat("id ", id, " is out of range [0, ", n, ") (ids must be 0..N-1 for N tokens)"));
    }
    if (seen[size_t(id)]) {
      id_field.fail(str_cat("duplicate id ", id, " (also the id of \"", m.tokens[size_t(id)], "\")"));
    }
    seen[size_t(id)] = 1;
    m.tokens[size_t(id)] = token;
    m.token_ids.emplace(token, int32_t(id));
  }
}

// added_tokens: [{"id", "content", "special", "lstrip", "rstrip", ...}]. An added token either repeats a
// vocab token (same id, same content) or takes a new id past the vocab; new ids must leave no gap.
void load_added_tokens(const JsonField& list, Tokenizer::Impl& m) {
  size_t n_vocab = m.tokens.size();
  size_t count = list.array_size();
  size_t n_total = n_vocab;
  // Room for every possible new id; trimmed to the largest one at the end.
  m.tokens.resize(n_vocab + count);
  for (auto* flags : {&m.special, &m.added, &m.lstrip, &m.rstrip}) flags->assign(n_vocab + count, 0);
  std::vector<uint8_t> filled(n_vocab + count, 0);
  std::fill(filled.begin(), filled.begin() + long(n_vocab), 1);
  for (size_t i = 0; i < count; i++) {
    JsonField entry = list.at(i);
    std::string content = entry.at("content").str();
    if (content.empty()) entry.at("content").fail("an added token must not be empty");
    JsonField id_field = entry.at("id");
    int64_t id = id_field.integer();
    if (id < 0 || id >= int64_t(n_vocab + count)) {
      id_field.fail(str_cat("id ", id, " is out of range [0, ", n_vocab + count, ")"));
    }
    size_t slot = size_t(id);
    if (filled[slot] && m.tokens[slot] != content) {
      id_field.fail(
          str_cat("id ", id, " is already the token \"", m.tokens[slot], "\", not \"", content, "\""));
    }
    auto known = m.token_ids.find(content);
    if (known != m.token_ids.end() && known->second != id) {
      entry.at("content").fail(str_cat("\"", content, "\" already has id ", known->second, ", not ", id));
    }
    filled[slot] = 1;
    n_total = std::max(n_total, slot + 1);
    m.tokens[slot] = content;
    m.token_ids[content] = int32_t(id);
    m.special[slot] = entry.bool_or("special", false);
    m.added[slot] = 1;
    m.lstrip[slot] = entry.bool_or("lstrip", false);
    m.rstrip[slot] = entry.bool_or("rstrip", false);
    entry.bool_or("normalized", false);  // type checks only: added tokens are matched on raw text
    entry.bool_or("single_word", false);
    m.added_matcher.add(content, int32_t(id));
  }
  for (size_t id = n_vocab; id < n_total; id++) {
    if (!filled[id]) list.fail(str_cat("no token has id ", id, " (ids past model.vocab must be contiguous)"));
  }
  m.tokens.resize(n_total);
  for (auto* flags : {&m.special, &m.added, &m.lstrip, &m.rstrip}) flags->resize(n_total);
}

int32_t first_known(const Tokenizer::Impl& m, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = m.token_ids.find(std::string_view(name));
    if (it != m.token_ids.end()) return it->second;
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

  auto m = std::make_shared<Impl>();
  m->name = name;
  JsonField model = root.at("model");
  if (!model.raw().is_object()) model.fail(str_cat("expected an object, got ", model.type_name()));
  std::string type = model.find("type") ? model.at("type").str() : (model.find("merges") ? "BPE" : "");
  if (type != "BPE") {
    model.fail(type.empty() ? std::string("has no \"type\" (only BPE models are supported)")
                            : str_cat("unsupported model type \"", type, "\" (only BPE is supported)"));
  }
  load_vocab(model.at("vocab"), *m);
  m->special.assign(m->tokens.size(), 0);
  m->added.assign(m->tokens.size(), 0);
  m->lstrip.assign(m->tokens.size(), 0);
  m->rstrip.assign(m->tokens.size(), 0);
  if (auto added = root.find("added_tokens")) load_added_tokens(*added, *m);
  m->model = std::make_unique<BpeModel>(model, m->token_ids);

  if (auto f = root.find("normalizer")) m->normalizer = make_normalizer(*f);
  if (auto f = root.find("pre_tokenizer")) m->pre_tokenizer = make_pre_tokenizer(*f);
  if (auto f = root.find("post_processor")) {
    const Impl* impl = m.get();
    auto token_id = [impl](const std::string& token) {
      auto it = impl->token_ids.find(token);
      return it == impl->token_ids.end() ? -1 : it->second;
    };
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
