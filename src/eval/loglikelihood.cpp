#include "eval/loglikelihood.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "kernels/vec_math.h"

namespace zaya::eval {

LoglikelihoodResult score_rows(const float* logits, int64_t V, const std::vector<int32_t>& continuation) {
  LoglikelihoodResult r;
  r.is_greedy = true;
  for (size_t j = 0; j < continuation.size(); j++) {
    const float* row = logits + int64_t(j) * V;
    const float mx = row_max(row, V);
    // log p(t) = x_t − max − ln Σ exp(x − max): vectorised exp, the sum in double (kernels/vec_math.h, the
    // cross-entropy's own pair).
    r.loglikelihood +=
        double(row[continuation[j]]) - double(mx) - std::log(exp_shift_sum(nullptr, row, V, mx));
    // Greedy: the token is the first maximum of its row (torch.argmax).
    if (!(row[continuation[j]] == mx)) {
      r.is_greedy = false;
    } else {
      for (int32_t v = 0; v < continuation[j]; v++)
        if (row[v] == mx) {
          r.is_greedy = false;
          break;
        }
    }
  }
  // A NaN logit anywhere in a row makes its loglikelihood NaN; never report such a request as greedy.
  if (std::isnan(r.loglikelihood)) r.is_greedy = false;
  return r;
}

namespace {

// One group of requests: its shared prefix runs once, then each request's tail.
struct Unit {
  std::vector<size_t> requests;  // indexes into the caller's requests, in input order
  int64_t prefix = 0;            // tokens of the shared prefix (0: no sharing)
  int64_t tokens = 0;            // tokens the unit runs: prefix + Σ (len_i - prefix)
};

// The longest prefix every request of `u` shares, short of the first position whose logits any of them
// needs (position len_i - k_i predicts continuation[0]; its input token must be in the tail).
int64_t shared_prefix(const std::vector<ScoringInput>& requests, const Unit& u) {
  int64_t limit = INT64_MAX;
  for (size_t i : u.requests)
    limit = std::min<int64_t>(limit, int64_t(requests[i].input.size() - requests[i].continuation.size()));
  const std::vector<int32_t>& first = requests[u.requests[0]].input;
  int64_t p = 0;
  while (p < limit) {
    bool same = true;
    for (size_t i : u.requests) same = same && requests[i].input[size_t(p)] == first[size_t(p)];
    if (!same) break;
    p++;
  }
  return p;
}

}  // namespace

std::vector<LoglikelihoodResult> score_requests(const ZayaModel& model,
                                                const std::vector<ScoringInput>& requests,
                                                const std::vector<int64_t>& group,
                                                const ScoreOptions& options, ScoreStats* stats,
                                                const std::function<void(size_t, size_t)>& progress) {
  ZAYA_CHECK(group.empty() || group.size() == requests.size(), "score_requests: ", group.size(),
             " group ids for ", requests.size(), " requests");
  ZAYA_CHECK(options.batch_tokens > 0, "score_requests: batch_tokens must be positive");
  const int64_t V = model.cfg.vocab_size;
  for (size_t i = 0; i < requests.size(); i++) {
    const ScoringInput& r = requests[i];
    ZAYA_CHECK(!r.continuation.empty() && r.continuation.size() <= r.input.size(), "request ", i,
               ": the continuation (", r.continuation.size(),
               " tokens) must be non-empty and predicted by the input (", r.input.size(), " tokens)");
    for (int32_t id : r.input)
      ZAYA_CHECK(id >= 0 && id < V, "request ", i, ": token id ", id,
                 " is outside the model's vocabulary [0, ", V, ")");
    for (int32_t id : r.continuation)
      ZAYA_CHECK(id >= 0 && id < V, "request ", i, ": continuation token id ", id,
                 " is outside the model's vocabulary [0, ", V, ")");
  }

  // Units: one per group, requests in input order.
  std::vector<Unit> units;
  std::map<int64_t, size_t> unit_of;
  for (size_t i = 0; i < requests.size(); i++) {
    const int64_t g = group.empty() ? int64_t(i) : group[i];
    auto [it, fresh] = unit_of.emplace(g, units.size());
    if (fresh) units.emplace_back();
    units[it->second].requests.push_back(i);
  }
  ScoreStats st;
  for (Unit& u : units) {
    u.prefix = options.share_context && u.requests.size() > 1 ? shared_prefix(requests, u) : 0;
    u.tokens = u.prefix;
    for (size_t i : u.requests) u.tokens += int64_t(requests[i].input.size()) - u.prefix;
    st.tokens_saved += u.prefix * int64_t(u.requests.size() - 1);
  }
  // Longest first (lm-eval's Collator); ties keep input order, so a run is deterministic.
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return units[a].tokens > units[b].tokens; });

  // Pipelined: every forward runs the tails of the previous batch of units (from their prefixes' states)
  // together with the prefixes of the next batch, so each forward holds about batch_tokens tokens; units
  // without a shared prefix run whole in the forward of their batch.
  std::vector<LoglikelihoodResult> out(requests.size());
  ForwardScratch scratch;
  std::vector<float> logits;
  std::vector<int64_t> logit_row;
  size_t done = 0;
  std::vector<size_t> waiting;           // units whose prefix state is ready, tails not yet run
  std::vector<ZayaCache> waiting_state;  // [waiting]: each one's prefix state
  for (size_t u0 = 0; u0 < order.size() || !waiting.empty();) {
    // The next batch's units: at least one, then while the batch stays under batch_tokens.
    size_t u1 = u0;
    int64_t tokens = 0;
    while (u1 < order.size() && (u1 == u0 || tokens + units[order[u1]].tokens <= options.batch_tokens))
      tokens += units[order[u1++]].tokens;
    st.tokens_run += tokens;

    std::vector<ZayaCache> cache;  // one per entry below; reserved so the pointers stay valid
    size_t entries = 0;
    for (size_t w : waiting) entries += units[w].requests.size();
    for (size_t j = u0; j < u1; j++)
      entries += units[order[j]].prefix > 0 ? 1 : units[order[j]].requests.size();
    cache.reserve(entries);
    std::vector<SeqStep> steps;
    std::vector<int64_t> req_of_step;  // the request an entry scores, -1 for a prefix
    // Tails of the waiting units, each from a copy of its unit's prefix state.
    for (size_t w = 0; w < waiting.size(); w++) {
      const Unit& u = units[waiting[w]];
      for (size_t i : u.requests) {
        cache.push_back(waiting_state[w].compact_copy(model.cfg));
        const ScoringInput& r = requests[i];
        steps.push_back({&cache.back(), r.input.data() + u.prefix, int64_t(r.input.size()) - u.prefix,
                         int64_t(r.continuation.size())});
        req_of_step.push_back(int64_t(i));
      }
    }
    // The new batch: prefixes (no logits), and whole requests of units that share nothing.
    std::vector<size_t> next;
    std::vector<size_t> next_entry;  // [next]: the entry (and cache) of its prefix
    for (size_t j = u0; j < u1; j++) {
      const Unit& u = units[order[j]];
      if (u.prefix > 0) {
        cache.emplace_back(model.cfg, 1);
        steps.push_back({&cache.back(), requests[u.requests[0]].input.data(), u.prefix, 0});
        req_of_step.push_back(-1);
        next.push_back(order[j]);
        next_entry.push_back(steps.size() - 1);
        continue;
      }
      for (size_t i : u.requests) {
        cache.emplace_back(model.cfg, 1);
        const ScoringInput& r = requests[i];
        steps.push_back(
            {&cache.back(), r.input.data(), int64_t(r.input.size()), int64_t(r.continuation.size())});
        req_of_step.push_back(int64_t(i));
      }
    }
    zaya_forward_seqs(model, steps, logits, logit_row, scratch);
    st.forwards++;
#pragma omp parallel for schedule(dynamic)
    for (size_t e = 0; e < steps.size(); e++)
      if (req_of_step[e] >= 0)
        out[size_t(req_of_step[e])] =
            score_rows(logits.data() + logit_row[e] * V, V, requests[size_t(req_of_step[e])].continuation);
    for (size_t e = 0; e < steps.size(); e++)
      if (req_of_step[e] >= 0) {
        st.tokens_scored += int64_t(requests[size_t(req_of_step[e])].continuation.size());
        done++;
      }
    waiting_state.clear();
    for (size_t e : next_entry) waiting_state.push_back(std::move(cache[e]));
    waiting = std::move(next);
    if (progress) progress(done, requests.size());
    u0 = u1;
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace zaya::eval
