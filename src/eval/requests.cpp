#include "eval/requests.h"

#include <algorithm>

#include "core/error.h"
#include "eval/py_str.h"

namespace zaya::eval {

namespace {

std::vector<int32_t> with_bos(int32_t bos, std::vector<int32_t> ids) {
  if (bos >= 0) ids.insert(ids.begin(), bos);
  return ids;
}

}  // namespace

EncodedRequest encode_request(const std::string& context, const std::string& continuation,
                              const EncodeFn& encode, int32_t bos) {
  EncodedRequest r;
  if (context.empty()) {
    // TemplateLM.loglikelihood: ([prefix], encode(cont)) unless encode(cont) already starts with the prefix.
    ZAYA_CHECK(bos >= 0, "a request with an empty context needs a BOS (prefix) token id");
    std::vector<int32_t> cont = encode(continuation);
    if (!cont.empty() && cont[0] == bos) {
      r.context.assign(cont.begin(), cont.begin() + 1);
      r.continuation.assign(cont.begin() + 1, cont.end());
    } else {
      r.context = {bos};
      r.continuation = std::move(cont);
    }
    return r;
  }
  // TemplateLM._encode_pair.
  const size_t n_spaces = context.size() - python_rstrip(context).size();
  const std::string ctx = context.substr(0, context.size() - n_spaces);
  const std::string cont = context.substr(context.size() - n_spaces) + continuation;
  const std::vector<int32_t> whole = with_bos(bos, encode(ctx + cont));
  r.context = with_bos(bos, encode(ctx));
  if (r.context.size() < whole.size())
    r.continuation.assign(whole.begin() + int64_t(r.context.size()), whole.end());
  return r;
}

ScoringInput scoring_input(const EncodedRequest& request, int64_t max_len) {
  ZAYA_CHECK(max_len >= 1, "max_len must be at least 1, got ", max_len);
  ZAYA_CHECK(int64_t(request.continuation.size()) <= max_len, "the continuation has ",
             request.continuation.size(), " tokens, more than the model's context of ", max_len);
  std::vector<int32_t> all = request.context;
  all.insert(all.end(), request.continuation.begin(), request.continuation.end());
  ZAYA_CHECK(all.size() >= 2, "a request needs at least 2 tokens (context + continuation), got ", all.size());
  const size_t keep = std::min(all.size(), size_t(max_len + 1));
  ScoringInput s;
  s.input.assign(all.end() - int64_t(keep), all.end() - 1);
  s.continuation = request.continuation;
  return s;
}

}  // namespace zaya::eval
