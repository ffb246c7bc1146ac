#include "tokenizer/normalizer.h"

#include <vector>

#include "core/error.h"
#include "tokenizer/string_pattern.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(std::string text) const override { return replace_all(text, from_, to_); }

 private:
  std::string from_, to_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  // Callers never pass an empty text (an empty section is skipped before normalization).
  std::string normalize(std::string text) const override { return prefix_ + text; }

 private:
  std::string prefix_;
};

// Strips JavaScript white space from the left and/or right end.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        uint32_t cp;
        int len = utf8_decode(text, begin, &cp);
        if (!is_js_whitespace(cp)) break;
        begin += size_t(len);
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;  // back up to the start of the last character
        while (start > begin && (uint8_t(text[start]) & 0xC0) == 0x80) start--;
        uint32_t cp;
        utf8_decode(text, start, &cp);
        if (!is_js_whitespace(cp)) break;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string text) const override {
    for (const auto& step : steps_) text = step->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonField& config) {
  std::string type = config.at("type").str();
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(parse_string_pattern(config.at("pattern")),
                                               config.at("content").str());
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(config.at("prepend").str());
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(config.bool_or("strip_left", true),
                                             config.bool_or("strip_right", true));
  }
  if (type == "Sequence") {
    JsonField list = config.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.array_size(); i++) steps.push_back(make_normalizer(list.at(i)));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  config.at("type").fail(
      str_cat("unsupported normalizer type \"", type, "\" (supported: Replace, Prepend, Strip, Sequence)"));
}

}  // namespace zaya
