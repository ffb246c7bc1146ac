#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

namespace zaya::eval {

std::vector<RollingWindow> rolling_windows(const std::vector<int32_t>& t, int32_t prefix, int64_t max_len) {
  ZAYA_CHECK(max_len >= 1, "rolling windows need a context of at least 1 token, got ", max_len);
  std::vector<RollingWindow> out;
  const int64_t n = int64_t(t.size());
  if (n == 0) return out;
  const int64_t first = std::min(max_len, n);
  RollingWindow w;
  w.input.push_back(prefix);
  w.input.insert(w.input.end(), t.begin(), t.begin() + (first - 1));
  w.continuation.assign(t.begin(), t.begin() + first);
  out.push_back(std::move(w));
  int64_t done = first;
  while (done < n) {
    const int64_t pred = std::min(n - done, max_len), end = done + pred;
    // lm-eval's window [end - max_len - 1, end - 1) of inputs, made disjoint: the context part keeps only
    // what precedes the scored tokens; the model still reads all max_len inputs.
    RollingWindow v;
    v.input.assign(t.begin() + (end - max_len - 1 < 0 ? 0 : end - max_len - 1), t.begin() + (end - 1));
    v.continuation.assign(t.begin() + (end - pred), t.begin() + end);
    out.push_back(std::move(v));
    done = end;
  }
  return out;
}

int64_t count_words(const std::string& text) {
  // re.split(r"\s+", s): pieces between maximal runs of whitespace (\s: space, \t, \n, \r, \f, \v; ASCII
  // is what matters for the corpora used), including empty leading/trailing pieces.
  int64_t pieces = 1;
  bool in_space = false;
  for (unsigned char c : text) {
    const bool sp = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (sp && !in_space) pieces++;
    in_space = sp;
  }
  return pieces;
}

double PerplexityTotals::token_perplexity() const {
  return std::exp(-loglikelihood / double(std::max<int64_t>(tokens, 1)));
}
double PerplexityTotals::word_perplexity() const {
  return words > 0 ? std::exp(-loglikelihood / double(words)) : std::nan("");
}
double PerplexityTotals::byte_perplexity() const {
  return bytes > 0 ? std::exp(-loglikelihood / double(bytes)) : std::nan("");
}
double PerplexityTotals::bits_per_byte() const {
  return bytes > 0 ? -loglikelihood / double(bytes) / std::log(2.0) : std::nan("");
}

std::vector<double> score_windows(const ZayaModel& model, const std::vector<RollingWindow>& windows,
                                  int64_t batch, const std::function<void(size_t, size_t)>& progress) {
  std::vector<double> ll(windows.size(), 0.0);
  // Group by input length: full windows share one length, so they batch.
  std::map<size_t, std::vector<size_t>> by_len;
  for (size_t i = 0; i < windows.size(); i++) {
    ZAYA_CHECK(!windows[i].input.empty() && windows[i].continuation.size() <= windows[i].input.size(),
               "window ", i, ": the continuation must be predicted by the input");
    by_len[windows[i].input.size()].push_back(i);
  }
  const int64_t V = model.cfg.vocab_size;
  ForwardScratch sc;
  ForwardResult res;
  ForwardOptions opt;
  size_t done = 0;
  for (const auto& [len, idx] : by_len) {
    const int64_t S = int64_t(len);
    for (size_t i0 = 0; i0 < idx.size(); i0 += size_t(batch)) {
      const int64_t B = std::min<int64_t>(batch, int64_t(idx.size() - i0));
      std::vector<int32_t> ids(size_t(B * S));
      for (int64_t b = 0; b < B; b++) {
        const RollingWindow& w = windows[idx[i0 + size_t(b)]];
        std::copy(w.input.begin(), w.input.end(), ids.begin() + b * S);
      }
      ZayaCache cache(model.cfg, B);
      zaya_forward(model, cache, ids.data(), nullptr, B, S, opt, res, sc);
      for (int64_t b = 0; b < B; b++) {
        const size_t wi = idx[i0 + size_t(b)];
        const RollingWindow& w = windows[wi];
        const int64_t k = int64_t(w.continuation.size());
        double sum = 0;
        for (int64_t j = 0; j < k; j++) {
          const float* row = res.logits.data() + (b * S + (S - k + j)) * V;
          float mx = row[0];
          for (int64_t v = 1; v < V; v++) mx = std::max(mx, row[v]);
          double z = 0;
          for (int64_t v = 0; v < V; v++) z += std::exp(double(row[v] - mx));
          sum += double(row[w.continuation[size_t(j)]] - mx) - std::log(z);
        }
        ll[wi] = sum;
      }
      done += size_t(B);
      if (progress) progress(done, windows.size());
    }
  }
  return ll;
}

}  // namespace zaya::eval
