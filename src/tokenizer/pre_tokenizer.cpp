#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/string_pattern.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

// Splits text at the occurrences of delimiter, combining delimiters with their neighbours as behavior
// says (the Hugging Face semantics); appends the non-empty pieces to out.
void split_on_string(std::string_view text, std::string_view delimiter, Behavior behavior, bool invert,
                     std::vector<std::string>& out) {
  std::vector<Span> spans;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(delimiter, pos);
    if (hit == std::string_view::npos) break;
    if (hit > pos) spans.push_back({pos, hit, invert});
    spans.push_back({hit, hit + delimiter.size(), !invert});
    pos = hit + delimiter.size();
  }
  if (pos < text.size()) spans.push_back({pos, text.size(), invert});

  std::vector<Span> pieces;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) pieces.push_back(s);
      }
      break;
    case Behavior::kIsolated:
      for (const Span& s : spans) pieces.push_back(s);
      break;
    case Behavior::kMergedWithPrevious:  // a delimiter joins the piece before it (if that is no delimiter)
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty())
          pieces.back().end = s.end;
        else
          pieces.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:  // a delimiter joins the piece after it (if that is no delimiter)
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !pieces.empty())
          pieces.back().begin = s.begin;
        else
          pieces.push_back(s);
        previous_match = s.is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case Behavior::kContiguous:  // runs of delimiters become one piece
      for (const Span& s : spans) {
        if (s.is_match && previous_match && !pieces.empty())
          pieces.back().end = s.end;
        else
          pieces.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  for (const Span& s : pieces) {
    if (s.end > s.begin) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  }
}

Behavior parse_behavior(const JsonField& field) {
  std::string name = field.str();
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  field.fail(str_cat("unknown split behavior \"", name,
                     "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)"));
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string delimiter, Behavior behavior, bool invert)
      : delimiter_(std::move(delimiter)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& piece : pieces) split_on_string(piece, delimiter_, behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  std::string delimiter_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (std::string& piece : pieces) {
      if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
      if (use_regex_) {
        for (std::string_view word : split_gpt2(piece)) {
          out.emplace_back();
          append_byte_level(out.back(), word);
        }
      } else if (!piece.empty()) {
        out.emplace_back();
        append_byte_level(out.back(), piece);
      }
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_, use_regex_;
};

enum class Prepend { kAlways, kFirst, kNever };

// Replaces spaces with a visible marker (usually "▁"), may prepend one, and may cut before each marker.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void split(std::vector<std::string>& pieces, bool first_section) const override {
    std::vector<std::string> out;
    for (size_t k = 0; k < pieces.size(); k++) {
      std::string text = replace_all(pieces[k], " ", replacement_);
      bool want_prefix =
          prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && first_section && k == 0);
      if (want_prefix && text.compare(0, replacement_.size(), replacement_) != 0) text = replacement_ + text;
      if (split_)
        split_on_string(text, replacement_, Behavior::kMergedWithNext, false, out);
      else if (!text.empty())
        out.push_back(std::move(text));
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

// Splits on JavaScript white space, dropping it.
class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& piece : pieces) {
      size_t word_begin = 0;
      bool in_word = false;
      for (size_t i = 0; i < piece.size();) {
        uint32_t cp;
        int len = utf8_decode(piece, i, &cp);
        bool space = is_js_whitespace(cp);
        if (space && in_word) out.push_back(piece.substr(word_begin, i - word_begin));
        if (!space && !in_word) word_begin = i;
        in_word = !space;
        i += size_t(len);
      }
      if (in_word) out.push_back(piece.substr(word_begin));
    }
    pieces = std::move(out);
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(std::vector<std::string>& pieces, bool first_section) const override {
    for (const auto& step : steps_) step->split(pieces, first_section);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& config) {
  std::string type = config.at("type").str();
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(parse_string_pattern(config.at("pattern")),
                                               parse_behavior(config.at("behavior")),
                                               config.bool_or("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(config.bool_or("add_prefix_space", true),
                                                   config.bool_or("use_regex", true));
  }
  if (type == "Metaspace") {
    std::string replacement = config.at("replacement").str();
    if (replacement.empty()) config.at("replacement").fail("must not be empty");
    Prepend prepend = config.bool_or("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
    if (auto scheme = config.find("prepend_scheme")) {
      std::string s = scheme->str();
      if (s == "always")
        prepend = Prepend::kAlways;
      else if (s == "first")
        prepend = Prepend::kFirst;
      else if (s == "never")
        prepend = Prepend::kNever;
      else
        scheme->fail(str_cat("unknown prepend_scheme \"", s, "\" (expected always, first or never)"));
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, prepend, config.bool_or("split", true));
  }
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Sequence") {
    JsonField list = config.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.array_size(); i++) steps.push_back(make_pre_tokenizer(list.at(i)));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  config.at("type").fail(str_cat("unsupported pre_tokenizer type \"", type,
                                 "\" (supported: Split, ByteLevel, Metaspace, WhitespaceSplit, Sequence)"));
}

}  // namespace zaya
