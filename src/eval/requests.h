// Text requests -> token ids, with lm-evaluation-harness's rules (EleutherAI/lm-evaluation-harness@4e7e0d4):
//   lm_eval/api/model.py TemplateLM.loglikelihood + _encode_pair (causal backend):
//     - an empty context becomes [prefix token] (BOS) and the continuation is encoded alone (when its first
//       token is already the prefix token, that token becomes the context instead);
//     - otherwise trailing whitespace of the context moves to the front of the continuation
//       (n = len(context) - len(context.rstrip())), then whole = encode(context + continuation),
//       context_enc = encode(context), continuation_enc = whole[len(context_enc):];
//   lm_eval/models/huggingface.py HFLM._loglikelihood_tokens: the model reads
//     (context_enc + continuation_enc)[-(max_length + 1):][:-1]
//     and the last len(continuation_enc) positions of that input predict the continuation.
// Encoding: lm-eval's HF backend encodes with the tokenizer's special tokens (Gemma 3: a leading <bos>);
// here `encode` must add NO special tokens and the BOS is put in front explicitly, so that a tokenizer
// whose plain encode also appends an EOS cannot shift the split.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zaya::eval {

// text -> token ids WITHOUT special tokens (e.g. Tokenizer::encode(text, false)).
using EncodeFn = std::function<std::vector<int32_t>(const std::string&)>;

struct EncodedRequest {
  std::vector<int32_t> context;       // [bos] + encode(context without its trailing whitespace)
  std::vector<int32_t> continuation;  // the tokens scored
};

// lm-eval's split of one loglikelihood request (see above). `bos` < 0: no BOS in front (then an empty
// context is an error: lm-eval needs a prefix token for it).
EncodedRequest encode_request(const std::string& context, const std::string& continuation,
                              const EncodeFn& encode, int32_t bos);

// What the model reads for one request and what it scores (the same contract as RollingWindow in
// eval/perplexity.h: the last continuation.size() positions of `input` predict `continuation`).
struct ScoringInput {
  std::vector<int32_t> input;         // (context + continuation)[-(max_len + 1):][:-1]
  std::vector<int32_t> continuation;  // the continuation tokens, all of them scored
};

// Left-truncation to the model's context: at most max_len input tokens. Throws zaya::Error when the
// continuation alone does not fit (len > max_len) or the request has fewer than 2 tokens in all.
ScoringInput scoring_input(const EncodedRequest& request, int64_t max_len);

}  // namespace zaya::eval
