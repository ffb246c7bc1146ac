#include "model/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace zaya {

std::vector<std::vector<int32_t>> generate(const ZayaModel& model, const int32_t* prompt, int64_t B,
                                           int64_t S, const GenerateOptions& opt,
                                           const std::function<void(int64_t, int32_t)>& on_token,
                                           std::vector<float>* step_logits, GenerateStats* stats) {
  using clock = std::chrono::steady_clock;
  const int64_t V = model.cfg.vocab_size;
  ZAYA_CHECK(S >= 1, "generation needs a prompt of at least one token");
  ZayaCache cache(model.cfg, B);
  // The sequence's K/V at once (as the server's slots): growing it mid-decode copies the keys and faults in
  // fresh pages, a 70-110 ms stall on one step after a 512-token prompt of ZAYA1-8B. Up to 4096 new tokens up
  // front (320 MB a sequence for ZAYA1-8B): a longer run grows as it goes, by doubling.
  cache.reserve(model.cfg, S + std::min<int64_t>(opt.max_new_tokens, 4096));
  ForwardScratch scratch;
  ForwardResult res;
  ForwardOptions fo;
  fo.all_logits = false;
  Sampler sampler(opt.sampler);
  std::vector<std::vector<int32_t>> out(B);
  std::vector<bool> done(B, false);

  auto t0 = clock::now();
  const int64_t chunk = opt.prefill_chunk > 0 ? opt.prefill_chunk : S;
  std::vector<int32_t> part;
  for (int64_t s0 = 0; s0 < S; s0 += chunk) {
    int64_t n = std::min(chunk, S - s0);
    part.resize(B * n);
    for (int64_t b = 0; b < B; b++)
      std::copy(prompt + b * S + s0, prompt + b * S + s0 + n, part.begin() + b * n);
    zaya_forward(model, cache, part.data(), nullptr, B, n, fo, res, scratch);
  }
  auto t1 = clock::now();
  if (step_logits) step_logits->assign(B * opt.max_new_tokens * V, 0.f);
  std::vector<int32_t> next(B);
  int64_t produced = 0;
  for (int64_t step = 0; step < opt.max_new_tokens; step++) {
    bool any = false;
    for (int64_t b = 0; b < B; b++) {
      const float* lg = res.logits.data() + b * V;
      if (step_logits) std::copy(lg, lg + V, step_logits->begin() + (b * opt.max_new_tokens + step) * V);
      if (done[b]) {
        next[b] =
            int32_t(model.cfg.pad_token_id);  // finished rows keep decoding a pad (their output is ignored)
        continue;
      }
      next[b] = sampler.sample(lg, V);
      out[b].push_back(next[b]);
      produced++;
      if (on_token) on_token(b, next[b]);
      const auto& eos = model.cfg.eos_token_ids;
      if (opt.stop_at_eos && std::find(eos.begin(), eos.end(), next[b]) != eos.end()) done[b] = true;
      any |= !done[b];
    }
    if (!any || step + 1 == opt.max_new_tokens) break;
    zaya_forward(model, cache, next.data(), nullptr, B, 1, fo, res, scratch);
  }
  auto t2 = clock::now();
  if (stats) {
    stats->prefill_s = std::chrono::duration<double>(t1 - t0).count();
    stats->decode_s = std::chrono::duration<double>(t2 - t1).count();
    stats->prompt_tokens = B * S;
    stats->new_tokens = produced;
  }
  return out;
}

}  // namespace zaya
