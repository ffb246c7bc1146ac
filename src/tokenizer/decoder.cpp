#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/string_pattern.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (auto& t : tokens) {
      if (t.text.find(from_) != std::string::npos) t.text = replace_all(t.text, from_, to_);
    }
  }

 private:
  std::string from_, to_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// <0xNN> tokens become the byte they name; runs of them become one token of raw bytes.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    std::vector<DecodeToken> out;
    out.reserve(tokens.size());
    bool in_run = false;
    for (auto& t : tokens) {
      const std::string& s = t.text;
      int hi = s.size() == 6 ? hex_digit(s[3]) : -1, lo = s.size() == 6 ? hex_digit(s[4]) : -1;
      bool is_byte = s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && hi >= 0 && lo >= 0;
      if (!is_byte) {
        out.push_back(std::move(t));
        in_run = false;
        continue;
      }
      if (!in_run) out.push_back({});
      out.back().text.push_back(char(hi * 16 + lo));
      in_run = true;
    }
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    DecodeToken fused;
    for (const auto& t : tokens) fused.text += t.text;
    tokens.assign(1, std::move(fused));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    const size_t n = content_.size();
    for (auto& t : tokens) {
      size_t begin = 0, end = t.text.size();
      for (size_t k = 0; k < start_ && end - begin >= n && t.text.compare(begin, n, content_) == 0; k++)
        begin += n;
      for (size_t k = 0; k < stop_ && end - begin >= n && t.text.compare(end - n, n, content_) == 0; k++)
        end -= n;
      t.text = t.text.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// Maps byte-level code points back to bytes; added tokens and tokens with other characters stay as they are.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (auto& t : tokens) {
      if (t.is_added) continue;
      std::string bytes;
      bool all_mapped = true;
      for (size_t i = 0; i < t.text.size() && all_mapped;) {
        uint32_t cp;
        i += size_t(utf8_decode(t.text, i, &cp));
        int b = code_point_to_byte(cp);
        all_mapped = b >= 0;
        bytes.push_back(char(b));
      }
      if (all_mapped) t.text = std::move(bytes);
    }
  }
};

// Replaces the metaspace marker with a space, dropping the space the encoder prepended to the first token.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); i++) {
      std::string& s = tokens[i].text;
      s = replace_all(s, replacement_, " ");
      if (i == 0 && strip_first_ && !s.empty() && s[0] == ' ') s.erase(0, 1);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

size_t non_negative(const JsonField& f) {
  int64_t v = f.integer();
  if (v < 0) f.fail(str_cat("expected a count >= 0, got ", v));
  return size_t(v);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonField& config) {
  std::string type = config.at("type").str();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_string_pattern(config.at("pattern")),
                                            config.at("content").str());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::string content = config.at("content").str();
    uint32_t cp;
    if (content.empty() || size_t(utf8_decode(content, 0, &cp)) != content.size()) {
      config.at("content").fail("expected exactly one character");
    }
    return std::make_unique<StripDecoder>(content, non_negative(config.at("start")),
                                          non_negative(config.at("stop")));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    std::string replacement = config.at("replacement").str();
    if (replacement.empty()) config.at("replacement").fail("must not be empty");
    bool strip_first = config.bool_or("add_prefix_space", true);
    if (auto scheme = config.find("prepend_scheme")) strip_first = scheme->str() != "never";
    return std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  }
  if (type == "Sequence") {
    JsonField list = config.at("decoders");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.array_size(); i++) steps.push_back(make_decoder(list.at(i)));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  config.at("type").fail(
      str_cat("unsupported decoder type \"", type,
              "\" (supported: Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace, Sequence)"));
}

}  // namespace zaya
