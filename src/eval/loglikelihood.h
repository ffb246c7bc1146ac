// Scoring loglikelihood requests with the model: lm-eval's HFLM._loglikelihood_tokens
// (EleutherAI/lm-evaluation-harness@4e7e0d4, lm_eval/models/huggingface.py), on zaya's continuous-batching
// forward (model/zaya.h zaya_forward_seqs), with one saving lm-eval does not make:
//
//   For a request, the model reads `input` (eval/requests.h ScoringInput) and its last k positions predict
//   the k continuation tokens: ll = Σ_j log_softmax(logits[len - k + j])[continuation[j]], and is_greedy
//   = every continuation token is the argmax of its row (the first maximum on ties, as torch.argmax).
//
//   Requests of one group (the choices of one multiple-choice question) usually share their front: the
//   context. With `share_context`, the group's common prefix — at most up to the first position whose
//   logits any of its requests needs — runs once into a one-row cache, which is then copied for each
//   request, and only each request's own tail runs from it (CCA keeps its convolution and K/V state in the
//   cache, so the tail sees exactly the prefix's state). Without it, every request runs whole, as lm-eval
//   does. Both give the same loglikelihoods up to fp32 rounding of the batch composition (tested).
//
//   Groups are taken longest first (lm-eval's Collator orders by -len), packed into forwards of about
//   `batch_tokens` tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "eval/metrics.h"
#include "eval/requests.h"
#include "model/zaya.h"

namespace zaya::eval {

struct ScoreOptions {
  int64_t batch_tokens = 2048;  // tokens per forward, about (a group is never split)
  bool share_context = true;    // run a group's shared prefix once (see above)
};

// What one run scored: tokens the model read, and how many of them a shared prefix saved.
struct ScoreStats {
  int64_t forwards = 0;       // zaya_forward_seqs calls
  int64_t tokens_run = 0;     // tokens the model read
  int64_t tokens_saved = 0;   // tokens a shared prefix did not run again
  int64_t tokens_scored = 0;  // continuation tokens
};

// requests[i] scored; group[i] ([requests.size()], or empty: every request its own group) says which
// requests may share their prefix. `progress(done, total)` (nullable) after each forward, in requests.
std::vector<LoglikelihoodResult> score_requests(
    const ZayaModel& model, const std::vector<ScoringInput>& requests, const std::vector<int64_t>& group,
    const ScoreOptions& options, ScoreStats* stats = nullptr,
    const std::function<void(size_t, size_t)>& progress = nullptr);

// ll and is_greedy of `continuation` from its k logit rows (row j predicts continuation[j]), [k, V].
LoglikelihoodResult score_rows(const float* logits, int64_t V, const std::vector<int32_t>& continuation);

}  // namespace zaya::eval
