#include "eval/loglikelihood.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"

namespace zaya::eval {

LoglikelihoodResult score_rows(const float* logits, int64_t V, const std::vector<int32_t>& continuation) {
  LoglikelihoodResult r;
  r.is_greedy = true;
  for (size_t j = 0; j < continuation.size(); j++) {
    const float* row = logits + int64_t(j) * V;
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
      if (row[v] > row[best]) best = v;  // the first maximum, as torch.argmax
    const float mx = row[best];
    double z = 0;
    for (int64_t v = 0; v < V; v++) z += std::exp(double(row[v]) - double(mx));
    r.loglikelihood += double(row[continuation[j]]) - double(mx) - std::log(z);
    if (best != continuation[j]) r.is_greedy = false;
  }
  // A NaN logit anywhere in a row makes its loglikelihood NaN (z); never report such a request as greedy.
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

  std::vector<LoglikelihoodResult> out(requests.size());
  ForwardScratch scratch;
  std::vector<float> logits;
  std::vector<int64_t> logit_row;
  size_t done = 0;
  for (size_t u0 = 0; u0 < order.size();) {
    // This forward's units: at least one, then while the batch stays under batch_tokens.
    size_t u1 = u0 + 1;
    int64_t tokens = units[order[u0]].tokens;
    while (u1 < order.size() && tokens + units[order[u1]].tokens <= options.batch_tokens)
      tokens += units[order[u1++]].tokens;

    // 1. The shared prefixes, no logits.
    std::vector<ZayaCache> prefix_cache(u1 - u0);
    std::vector<SeqStep> steps;
    for (size_t j = u0; j < u1; j++) {
      const Unit& u = units[order[j]];
      if (u.prefix == 0) continue;
      prefix_cache[j - u0] = ZayaCache(model.cfg, 1);
      steps.push_back({&prefix_cache[j - u0], requests[u.requests[0]].input.data(), u.prefix, 0});
    }
    if (!steps.empty()) {
      zaya_forward_seqs(model, steps, logits, logit_row, scratch);
      st.forwards++;
    }
    // 2. Every request's tail from its unit's prefix state (a copy), with the continuation's logits.
    std::vector<size_t> req_of_step;
    std::vector<ZayaCache> cache;
    for (size_t j = u0; j < u1; j++) cache.resize(cache.size() + units[order[j]].requests.size());
    steps.clear();
    size_t c = 0;
    for (size_t j = u0; j < u1; j++) {
      const Unit& u = units[order[j]];
      for (size_t i : u.requests) {
        cache[c] = u.prefix > 0 ? prefix_cache[j - u0].compact_copy(model.cfg) : ZayaCache(model.cfg, 1);
        const ScoringInput& r = requests[i];
        const int64_t n = int64_t(r.input.size()) - u.prefix;
        steps.push_back({&cache[c], r.input.data() + u.prefix, n, int64_t(r.continuation.size())});
        req_of_step.push_back(i);
        c++;
      }
    }
    zaya_forward_seqs(model, steps, logits, logit_row, scratch);
    st.forwards++;
    for (size_t s = 0; s < steps.size(); s++) {
      const ScoringInput& r = requests[req_of_step[s]];
      out[req_of_step[s]] = score_rows(logits.data() + logit_row[s] * V, V, r.continuation);
      st.tokens_scored += int64_t(r.continuation.size());
    }
    st.tokens_run += tokens;
    done += steps.size();
    if (progress) progress(done, requests.size());
    u0 = u1;
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace zaya::eval
