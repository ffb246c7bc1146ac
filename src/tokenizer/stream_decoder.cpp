// StreamDecoder: decodes a small window (the previous token as context + the tokens not yet returned)
// and returns the bytes past what was already returned, up to the last complete character. The context
// token makes later tokens decode exactly as inside decode() of the whole sequence (e.g. a decoder that
// drops the first token's leading space drops it once, not at every push).
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace zaya {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
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
  if (complete == raw.size() && window_.size() > 1) {  // nothing pending: keep only the newest token
    window_.erase(window_.begin(), window_.end() - 1);
    returned_ = tokenizer_->decode_bytes(window_, skip_special_tokens_).size();
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
