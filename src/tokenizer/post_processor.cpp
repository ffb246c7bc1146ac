#include "tokenizer/post_processor.h"

#include "core/error.h"

namespace zaya {
namespace {

// prefix + ids + suffix: what every supported single-sequence template reduces to.
class WrapPostProcessor : public PostProcessor {
 public:
  WrapPostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void apply(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }
  int32_t first_prefix_id() const override { return prefix_.empty() ? -1 : prefix_[0]; }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void apply(std::vector<int32_t>& ids) const override {
    for (const auto& step : steps_) step->apply(ids);
  }
  int32_t first_prefix_id() const override {
    // The last step wraps outermost, so its prefix comes first.
    for (size_t k = steps_.size(); k-- > 0;) {
      if (steps_[k]->first_prefix_id() >= 0) return steps_[k]->first_prefix_id();
    }
    return -1;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> make_template(const JsonField& config, int32_t vocab_size) {
  JsonField single = config.at("single");
  std::optional<JsonField> specials = config.find("special_tokens");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.array_size(); i++) {
    JsonField item = single.at(i);
    if (auto seq = item.find("Sequence")) {
      std::string id = seq->at("id").str();
      if (id != "A")
        seq->at("id").fail(str_cat("a single-sequence template can only hold sequence A, got \"", id, "\""));
      if (seen_sequence) item.fail("sequence A appears twice");
      seen_sequence = true;
    } else if (auto special = item.find("SpecialToken")) {
      std::string name = special->at("id").str();
      if (!specials)
        config.fail(str_cat("special token \"", name, "\" is used but special_tokens is missing"));
      std::optional<JsonField> entry = specials->find(name);
      if (!entry) specials->fail(str_cat("has no entry for the special token \"", name, "\""));
      JsonField ids = entry->at("ids");
      for (size_t k = 0; k < ids.array_size(); k++) {
        int64_t id = ids.at(k).integer();
        if (id < 0 || id >= vocab_size)
          ids.at(k).fail(str_cat("token id ", id, " is out of range [0, ", vocab_size, ")"));
        (seen_sequence ? suffix : prefix).push_back(int32_t(id));
      }
    } else {
      item.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_sequence) single.fail("the template has no {\"Sequence\": {\"id\": \"A\"}}");
  return std::make_unique<WrapPostProcessor>(std::move(prefix), std::move(suffix));
}

// "cls": ["[CLS]", 101] -> 101, checked against the vocabulary.
int32_t special_pair(const JsonField& pair, const TokenIdFn& token_id) {
  if (pair.array_size() != 2) pair.fail("expected [token, id]");
  std::string token = pair.at(0).str();
  int64_t id = pair.at(1).integer();
  if (token_id(token) != id)
    pair.fail(str_cat("token \"", token, "\" does not have id ", id, " in the vocabulary"));
  return int32_t(id);
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonField& config, const TokenIdFn& token_id,
                                                   int32_t vocab_size) {
  std::string type = config.at("type").str();
  if (type == "TemplateProcessing") return make_template(config, vocab_size);
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return std::make_unique<WrapPostProcessor>(
        std::vector<int32_t>{special_pair(config.at("cls"), token_id)},
        std::vector<int32_t>{special_pair(config.at("sep"), token_id)});
  }
  if (type == "ByteLevel")
    return std::make_unique<WrapPostProcessor>(std::vector<int32_t>{}, std::vector<int32_t>{});
  if (type == "Sequence") {
    JsonField list = config.at("processors");
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.array_size(); i++)
      steps.push_back(make_post_processor(list.at(i), token_id, vocab_size));
    return std::make_unique<SequencePostProcessor>(std::move(steps));
  }
  config.at("type").fail(
      str_cat("unsupported post_processor type \"", type,
              "\" (supported: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, "
              "Sequence)"));
}

}  // namespace zaya
