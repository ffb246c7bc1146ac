// StreamDecoder: decodes a small window (the previous token as context + the tokens whose text is not
// all returned yet) and returns the bytes past what was already returned, up to the last complete
// character. The context token makes later tokens decode exactly as inside decode() of the whole
// sequence (e.g. a decoder that drops the first token's leading space drops it once, not at every push;
// a decoder that joins tokens with spaces puts the space before the new token).
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace zaya {
namespace {
constexpr size_t kMaxWindow = 8;      // tokens; a window only grows while a character is incomplete
constexpr size_t kTrimmedWindow = 4;  // context + the last 3 tokens, which hold any pending bytes
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  // A skipped special token changes nothing in decode(): it does not even enter the window.
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return "";
  window_.push_back(id);
  std::string raw;
  try {
    raw = tokenizer_->decode_bytes(window_, skip_special_tokens_);
  } catch (...) {
    window_.pop_back();  // a bad id leaves the stream as it was
    throw;
  }
  // Decoders only append as tokens are added, so raw extends the bytes returned so far.
  size_t complete = utf8_complete_prefix(raw);
  std::string out;
  if (complete > returned_) {
    out = utf8_repair(std::string_view(raw).substr(returned_, complete - returned_));
    returned_ = complete;
  }
  if (complete == raw.size()) {  // nothing pending: the newest token is the only context needed
    if (window_.size() > 1) {
      window_.erase(window_.begin(), window_.end() - 1);
      returned_ = tokenizer_->decode_bytes(window_, skip_special_tokens_).size();
    }
  } else if (window_.size() > kMaxWindow) {
    // Still pending after many tokens (e.g. a run of lead bytes): keep the last few tokens, provided they
    // reproduce the same pending bytes, so that each push stays O(1).
    size_t pending = raw.size() - complete;
    std::vector<int32_t> tail(window_.end() - kTrimmedWindow, window_.end());
    std::string tail_raw = tokenizer_->decode_bytes(tail, skip_special_tokens_);
    if (tail_raw.size() >= pending && utf8_complete_prefix(tail_raw) == tail_raw.size() - pending &&
        tail_raw.compare(tail_raw.size() - pending, pending, raw, complete, pending) == 0) {
      window_ = std::move(tail);
      returned_ = tail_raw.size() - pending;
    }
  }
  return out;
}

std::string StreamDecoder::flush() {
  std::string raw = tokenizer_->decode_bytes(window_, skip_special_tokens_);
  std::string out = returned_ < raw.size() ? utf8_repair(std::string_view(raw).substr(returned_)) : "";
  window_.clear();
  returned_ = 0;
  return out;
}

}  // namespace zaya
