#include "tokenizer/tokenizer_json.h"

#include <utility>

#include "core/error.h"

namespace zaya {
namespace {

using json = nlohmann::json;

// Builds the document from SAX events, except that the values of model.vocab and model.merges go to the
// flat arrays (an empty placeholder stays in the document). Returns false from an event to stop: either
// the JSON is broken (error_ is set) or vocab/merges hold something unexpected (fallback_ is set).
class StreamingReader : public nlohmann::json_sax<json> {
 public:
  explicit StreamingReader(TokenizerJson& out) : out_(out) {}

  bool fallback() const { return fallback_; }
  const std::string& error() const { return error_; }
  bool vocab_streamed() const { return vocab_streamed_; }
  bool merges_streamed() const { return merges_streamed_; }

  bool null() override { return scalar(nullptr); }
  bool boolean(bool v) override { return scalar(v); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return scalar(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab)
      return v <= number_unsigned_t(INT64_MAX) ? vocab_id(int64_t(v)) : stop_streaming();
    return scalar(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return scalar(v); }
  bool binary(binary_t&) override { return stop_streaming(); }  // never produced by JSON text

  bool string(string_t& s) override {
    if (mode_ == Mode::kMerges) {  // the old format: "left right" with exactly one space
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return stop_streaming();
      out_.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      return true;
    }
    if (mode_ == Mode::kMergePair) {  // ["left", "right"]
      if (pair_size_ >= 2) return stop_streaming();
      (pair_size_ == 0 ? pair_.first : pair_.second) = std::move(s);
      pair_size_++;
      return true;
    }
    return scalar(std::move(s));
  }

  bool start_object(std::size_t) override {
    Expect expect = std::exchange(expect_, Expect::kNothing);
    if (mode_ != Mode::kDom) return stop_streaming();
    if (expect == Expect::kVocab) {  // model.vocab: stream its members
      add(json::object());
      mode_ = Mode::kVocab;
      vocab_streamed_ = true;
      return true;
    }
    json* object = add(json::object());
    if (expect == Expect::kModel) model_ = object;
    stack_.push_back(object);
    return true;
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::kDom) return stop_streaming();
    // A repeated "model", "vocab" or "merges" key: let the plain document decide (last one wins).
    if (stack_.size() == 1 && k == "model") {
      if (model_seen_) return stop_streaming();
      model_seen_ = true;
      expect_ = Expect::kModel;
    } else if (!stack_.empty() && stack_.back() == model_ && (k == "vocab" || k == "merges")) {
      bool& seen = k == "vocab" ? vocab_seen_ : merges_seen_;
      if (seen) return stop_streaming();
      seen = true;
      expect_ = k == "vocab" ? Expect::kVocab : Expect::kMerges;
    }
    key_ = std::move(k);
    return true;
  }

  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    if (mode_ != Mode::kDom) return stop_streaming();
    stack_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    Expect expect = std::exchange(expect_, Expect::kNothing);
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_size_ = 0;
      return true;
    }
    if (mode_ != Mode::kDom) return stop_streaming();
    if (expect == Expect::kMerges) {  // model.merges: stream its entries
      add(json::array());
      mode_ = Mode::kMerges;
      merges_streamed_ = true;
      return true;
    }
    stack_.push_back(add(json::array()));
    return true;
  }

  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ != 2) return stop_streaming();
      out_.merges.push_back(std::move(pair_));
      pair_ = {};
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    if (mode_ != Mode::kDom) return stop_streaming();
    stack_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };
  enum class Expect { kNothing, kModel, kVocab, kMerges };  // what the value after the last key is

  // Adds v where the document is at (root, array element or object member) and returns it.
  json* add(json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }

  template <typename T>
  bool scalar(T&& v) {
    expect_ = Expect::kNothing;
    if (mode_ != Mode::kDom) return stop_streaming();
    add(json(std::forward<T>(v)));
    return true;
  }

  bool vocab_id(int64_t id) {
    out_.vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }

  bool stop_streaming() {
    fallback_ = true;
    return false;
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;  // open containers, innermost last
  std::string key_;           // the key of the next object member
  Mode mode_ = Mode::kDom;
  Expect expect_ = Expect::kNothing;
  json* model_ = nullptr;
  bool model_seen_ = false, vocab_seen_ = false, merges_seen_ = false;  // keys seen
  bool vocab_streamed_ = false, merges_streamed_ = false;
  std::string vocab_key_;
  std::pair<std::string, std::string> pair_;
  int pair_size_ = 0;
  bool fallback_ = false;
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& name) {
  TokenizerJson out;
  {
    StreamingReader reader(out);
    bool ok = json::sax_parse(text.begin(), text.end(), &reader);
    if (ok) {
      out.vocab_streamed = reader.vocab_streamed();
      out.merges_streamed = reader.merges_streamed();
      return out;
    }
    if (!reader.fallback()) fail(str_cat(name, ": not valid JSON (", reader.error(), ")"));
  }
  // Something unusual in vocab or merges: read the whole plain document instead.
  out = TokenizerJson{};
  try {
    out.doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(str_cat(name, ": not valid JSON (", e.what(), ")"));
  }
  return out;
}

}  // namespace zaya
