// Tokenizer::encode / decode and the small accessors (loading is in tokenizer_load.cpp).
#include "tokenizer/tokenizer.h"

#include <memory>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {

struct Section {
  size_t begin, end;
  int32_t added_id;  // -1 for plain text
};

// Trims JavaScript white space (as String.prototype.trimStart / trimEnd do).
void trim_section(std::string_view text, Section& s, bool left, bool right) {
  while (left && s.begin < s.end) {
    uint32_t cp;
    int len = utf8_decode(text, s.begin, &cp);
    if (!is_js_whitespace(cp)) break;
    s.begin += size_t(len);
  }
  while (right && s.end > s.begin) {
    size_t start = s.end - 1;
    while (start > s.begin && (uint8_t(text[start]) & 0xC0) == 0x80) start--;
    uint32_t cp;
    utf8_decode(text, start, &cp);
    if (!is_js_whitespace(cp)) break;
    s.end = start;
  }
}

// Encodes one text section (no added tokens inside) and appends its ids.
void encode_section(const Tokenizer::Impl& m, std::string_view section, bool first_section,
                    BpeScratch& scratch, std::vector<std::string>& pieces, std::vector<int32_t>& ids) {
  if (section.empty()) return;
  std::string text(section);
  if (m.normalizer) text = m.normalizer->normalize(std::move(text));
  if (text.empty()) return;
  pieces.clear();
  pieces.push_back(std::move(text));
  if (m.pre_tokenizer) m.pre_tokenizer->split(pieces, first_section);
  size_t start = ids.size();
  for (const std::string& piece : pieces) m.model->encode(piece, ids, scratch);
  int32_t unk = m.model->unk_id();
  if (m.model->fuse_unk() && unk >= 0) {  // runs of unk collapse into one, across the whole section
    size_t write = start;
    for (size_t read = start; read < ids.size(); read++) {
      if (ids[read] == unk && write > start && ids[write - 1] == unk) continue;
      ids[write++] = ids[read];
    }
    ids.resize(write);
  }
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!utf8_is_valid(text)) {
    repaired = utf8_repair(text);
    text = repaired;
  }

  // Cut the text at added tokens.
  std::vector<Section> sections;
  for (size_t pos = 0; pos < text.size();) {
    AddedTokenMatcher::Match match = m.added_matcher.find(text, pos);
    if (match.pos == std::string_view::npos) {
      sections.push_back({pos, text.size(), -1});
      break;
    }
    if (match.pos > pos) sections.push_back({pos, match.pos, -1});
    sections.push_back({match.pos, match.pos + match.len, match.id});
    pos = match.pos + match.len;
  }
  // Added tokens with lstrip / rstrip eat the white space of the text next to them.
  for (size_t i = 0; i < sections.size(); i++) {
    int32_t id = sections[i].added_id;
    if (id < 0) continue;
    if (m.lstrip[size_t(id)] && i > 0 && sections[i - 1].added_id < 0)
      trim_section(text, sections[i - 1], false, true);
    if (m.rstrip[size_t(id)] && i + 1 < sections.size() && sections[i + 1].added_id < 0) {
      trim_section(text, sections[i + 1], true, false);
    }
  }

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  // Each thread keeps the scratch (with its word cache) of the last tokenizer it used, so a stream of
  // short encode() calls still hits the cache. It is keyed by the tokenizer's serial number, never by
  // its address, so a tokenizer loaded later at the same address cannot see stale entries.
  thread_local uint64_t scratch_serial = 0;
  thread_local std::unique_ptr<BpeScratch> scratch_ptr;
  if (scratch_serial != m.serial || !scratch_ptr) {
    scratch_ptr = std::make_unique<BpeScratch>();
    scratch_serial = m.serial;
  }
  BpeScratch& scratch = *scratch_ptr;
  std::vector<std::string> pieces;
  for (const Section& s : sections) {
    if (s.added_id >= 0)
      ids.push_back(s.added_id);
    else
      encode_section(m, text.substr(s.begin, s.end - s.begin), s.begin == 0, scratch, pieces, ids);
  }
  if (add_special_tokens && m.post_processor) m.post_processor->apply(ids);
  return ids;
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<DecodeToken> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    ZAYA_CHECK(id >= 0 && size_t(id) < m.tokens.size(), "decode: token id ", id, " is out of range [0, ",
               m.tokens.size(), ") of tokenizer '", m.name, "'");
    if (skip_special_tokens && m.special[size_t(id)]) continue;
    tokens.push_back({m.tokens.token(id), m.added[size_t(id)] != 0});
  }
  std::string text;
  if (m.decoder) {
    m.decoder->decode_chain(tokens);
    for (const auto& t : tokens) text += t.text;
  } else {  // no decoder: tokens joined by spaces, like the reference
    for (size_t i = 0; i < tokens.size(); i++) text += (i ? " " : "") + tokens[i].text;
  }
  return text;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string raw = decode_bytes(ids, skip_special_tokens);
  return utf8_is_valid(raw) ? raw : utf8_repair(raw);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  return impl_->tokens.find(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  ZAYA_CHECK(id >= 0 && size_t(id) < impl_->tokens.size(), "token id ", id, " is out of range [0, ",
             impl_->tokens.size(), ") of tokenizer '", impl_->name, "'");
  return impl_->tokens.token(id);
}

int32_t Tokenizer::vocab_size() const {
  return int32_t(impl_->tokens.size());
}
int32_t Tokenizer::bos_id() const {
  return impl_->bos;
}
int32_t Tokenizer::eos_id() const {
  return impl_->eos;
}
int32_t Tokenizer::pad_id() const {
  return impl_->pad;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->special.size() && impl_->special[size_t(id)];
}

}  // namespace zaya
