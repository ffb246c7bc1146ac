// The continuous-batching engine (src/serve/engine.h) on the golden tiny ZAYA1 (vocab 512, 4 layers): a
// sequence served among others gives the tokens it gives alone and what `generate` gives; the prompt-state
// cache reuses a finished sequence's state without changing the output; cancellation, the queue bound and
// prompt log-probabilities.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "core/error.h"
#include "kernels/gemm.h"
#include "model/generate.h"
#include "test_util.h"

using namespace zaya;
using namespace zaya::serve;

namespace {

const ZayaModel& golden_model() {
  static ZayaModel m = ZayaModel::load(test::golden_dir());
  return m;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish;
  int64_t cached = 0;
};

Result collect(SeqHandle& h) {
  Result r;
  std::vector<SeqEvent> ev;
  for (;;) {
    ev.clear();
    if (!h.wait(ev, 30000)) ADD_FAILURE() << "no event for 30 s";
    for (const SeqEvent& e : ev) {
      if (e.kind == SeqEvent::Kind::Done) {
        r.finish = e.finish_reason;
        r.cached = h.cached_tokens();
        return r;
      }
      r.tokens.push_back(e.token);
      r.logprobs.push_back(e.logprob);
    }
  }
}

// Requests of different prompt lengths, output lengths and samplers (even: greedy, odd: seeded).
std::vector<SeqRequest> mixed_requests(int n) {
  std::mt19937 rng(7);
  std::vector<SeqRequest> reqs;
  for (int i = 0; i < n; i++) {
    SeqRequest r;
    r.prompt.resize(3 + (i * 5) % 17);
    for (auto& t : r.prompt) t = int32_t(3 + rng() % 500);
    r.max_tokens = 4 + (i * 3) % 9;
    r.sampler.greedy = i % 2 == 0;
    r.sampler.temperature = 0.9f;
    r.sampler.top_p = 0.95f;
    r.sampler.seed = 100 + i;
    r.top_logprobs = 0;
    reqs.push_back(r);
  }
  return reqs;
}

}  // namespace

// Alone, a greedy sequence gives what generate() gives (same forward: a one-call prefill, then decodes).
TEST(Engine, GreedyAloneEqualsGenerate) {
  const ZayaModel& m = golden_model();
  EngineOptions o;
  o.parallel = 1;
  o.ctx_size = 64;
  Engine engine(m, o);
  for (const SeqRequest& req : mixed_requests(6)) {
    if (!req.sampler.greedy) continue;
    GenerateOptions g;
    g.max_new_tokens = req.max_tokens;
    g.stop_at_eos = false;
    auto want = generate(m, req.prompt.data(), 1, int64_t(req.prompt.size()), g);
    Result got = collect(*engine.submit(req));
    EXPECT_EQ(got.tokens, want[0]);
    EXPECT_EQ(got.finish, "length");
  }
}

// 16 sequences with staggered arrivals through 4 slots and a small token budget (prefill chunks mix with
// decodes) give, token for token, what each gives served alone.
TEST(Engine, BatchedEqualsAlone) {
  const ZayaModel& m = golden_model();
  const std::vector<SeqRequest> reqs = mixed_requests(16);
  std::vector<Result> alone;
  {
    EngineOptions o;
    o.parallel = 1;
    o.ctx_size = 64;
    o.cache_prompt = false;
    Engine engine(m, o);
    for (const SeqRequest& r : reqs) alone.push_back(collect(*engine.submit(r)));
  }
  EngineOptions o;
  o.parallel = 4;
  o.batch_tokens = 8;
  o.ctx_size = 64;
  o.cache_prompt = false;
  Engine engine(m, o);
  std::vector<std::shared_ptr<SeqHandle>> hs;
  for (size_t i = 0; i < reqs.size(); i++) {
    hs.push_back(engine.submit(reqs[i]));
    if (i % 3 == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t i = 0; i < reqs.size(); i++) {
    Result got = collect(*hs[i]);
    EXPECT_EQ(got.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(got.finish, alone[i].finish) << "request " << i;
    ASSERT_EQ(got.logprobs.size(), alone[i].logprobs.size());
    for (size_t j = 0; j < got.logprobs.size(); j++) {
      EXPECT_FALSE(std::isnan(got.logprobs[j]));
      EXPECT_NEAR(got.logprobs[j], alone[i].logprobs[j], 1e-4) << "request " << i << " token " << j;
    }
  }
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  int64_t want_gen = 0;
  for (const Result& r : alone) want_gen += int64_t(r.tokens.size());
  EXPECT_EQ(st.generated_tokens, want_gen);
}

// A follow-up whose prompt extends an earlier prompt + output starts from the saved state: the reused
// tokens are reported and the output is the one a fresh prefill gives.
TEST(Engine, PromptCacheReusesStateAcrossTurns) {
  const ZayaModel& m = golden_model();
  EngineOptions o;
  o.parallel = 2;
  o.ctx_size = 96;
  Engine cached(m, o);
  o.cache_prompt = false;
  Engine fresh(m, o);
  SeqRequest turn1 = mixed_requests(1)[0];
  turn1.max_tokens = 6;
  Result r1 = collect(*cached.submit(turn1));
  EXPECT_EQ(r1.cached, 0);
  SeqRequest turn2 = turn1;
  turn2.prompt.insert(turn2.prompt.end(), r1.tokens.begin(), r1.tokens.end());
  for (int32_t t : {17, 99, 250}) turn2.prompt.push_back(t);
  Result r2 = collect(*cached.submit(turn2));
  // The state covers the first prompt and all outputs but the last (which was never fed back).
  EXPECT_EQ(r2.cached, int64_t(turn1.prompt.size() + r1.tokens.size() - 1));
  Result want = collect(*fresh.submit(turn2));
  EXPECT_EQ(want.cached, 0);
  EXPECT_EQ(r2.tokens, want.tokens);
  EXPECT_GT(cached.stats().cache_entries, 0);
}

// A model loaded with `--kv-cache bf16` serves from bf16 slot caches: greedy sequences alone give what
// generate() gives with the same caches, 8 staggered sequences through 4 slots give each its alone tokens,
// and a follow-up turn resumed from the prompt cache (a compact bf16 copy) gives the fresh prefill's tokens.
TEST(Engine, Bf16KvCacheServesLikeGenerate) {
  ZayaModel m = golden_model();
  m.kv_cache = DType::BF16;
  const std::vector<SeqRequest> reqs = mixed_requests(8);
  EngineOptions o;
  o.parallel = 1;
  o.ctx_size = 96;
  o.cache_prompt = false;
  std::vector<Result> alone;
  {
    Engine engine(m, o);
    for (const SeqRequest& req : reqs) {
      alone.push_back(collect(*engine.submit(req)));
      if (!req.sampler.greedy) continue;
      GenerateOptions g;
      g.max_new_tokens = req.max_tokens;
      g.stop_at_eos = false;
      EXPECT_EQ(alone.back().tokens, generate(m, req.prompt.data(), 1, int64_t(req.prompt.size()), g)[0]);
    }
  }
  o.parallel = 4;
  o.batch_tokens = 8;
  {
    Engine engine(m, o);
    std::vector<std::shared_ptr<SeqHandle>> hs;
    for (size_t i = 0; i < reqs.size(); i++) {
      hs.push_back(engine.submit(reqs[i]));
      if (i % 3 == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (size_t i = 0; i < reqs.size(); i++)
      EXPECT_EQ(collect(*hs[i]).tokens, alone[i].tokens) << "request " << i;
  }
  o.parallel = 2;
  o.cache_prompt = true;
  Engine cached(m, o);
  SeqRequest turn1 = reqs[0];
  turn1.max_tokens = 6;
  Result r1 = collect(*cached.submit(turn1));
  const size_t bytes_bf16 = cached.stats().cache_bytes;
  SeqRequest turn2 = turn1;
  turn2.prompt.insert(turn2.prompt.end(), r1.tokens.begin(), r1.tokens.end());
  for (int32_t t : {17, 99, 250}) turn2.prompt.push_back(t);
  Result r2 = collect(*cached.submit(turn2));
  EXPECT_EQ(r2.cached, int64_t(turn1.prompt.size() + r1.tokens.size() - 1));
  // The saved states hold bf16 keys and values: fewer bytes than an fp32 model's after the same turn.
  Engine cached_f32(golden_model(), o);
  collect(*cached_f32.submit(turn1));
  EXPECT_LT(bytes_bf16, cached_f32.stats().cache_bytes);
  o.cache_prompt = false;
  Engine fresh(m, o);
  EXPECT_EQ(r2.tokens, collect(*fresh.submit(turn2)).tokens);
}

// Prompt log-probabilities equal those of one full forward.
TEST(Engine, PromptLogprobsMatchFullForward) {
  const ZayaModel& m = golden_model();
  EngineOptions o;
  o.batch_tokens = 5;  // the prompt is scored across several chunks
  o.ctx_size = 64;
  Engine engine(m, o);
  SeqRequest req = mixed_requests(4)[3];
  req.prompt_logprobs = true;
  req.top_logprobs = 2;
  req.max_tokens = 0;
  auto h = engine.submit(req);
  Result r = collect(*h);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.finish, "length");
  const int64_t S = int64_t(req.prompt.size()), V = m.cfg.vocab_size;
  ZayaCache cache(m.cfg, 1);
  ForwardScratch sc;
  ForwardResult full;
  zaya_forward(m, cache, req.prompt.data(), nullptr, 1, S, ForwardOptions{}, full, sc);
  ASSERT_EQ(int64_t(h->prompt_logprobs.size()), S);
  EXPECT_EQ(h->prompt_logprobs[0], 0.f);
  for (int64_t p = 1; p < S; p++) {
    std::vector<TokenLogprob> top;
    const float want = token_logprobs(full.logits.data() + (p - 1) * V, V, req.prompt[p], 2, &top);
    EXPECT_NEAR(h->prompt_logprobs[p], want, 1e-4) << "position " << p;
    ASSERT_EQ(h->prompt_top[p].size(), 2u);
    EXPECT_EQ(h->prompt_top[p][0].id, top[0].id);
  }
}

// A cancelled sequence ends with "abort" and frees its slot; a full queue refuses; bad prompts are errors.
TEST(Engine, CancelQueueAndBadRequests) {
  const ZayaModel& m = golden_model();
  EngineOptions o;
  o.parallel = 1;
  o.queue_size = 1;
  o.ctx_size = 4000;
  Engine engine(m, o);
  SeqRequest long_req = mixed_requests(1)[0];
  long_req.max_tokens = 3000;
  auto a = engine.submit(long_req);
  // Wait until it runs, so the next one waits in the queue.
  std::vector<SeqEvent> ev;
  ASSERT_TRUE(a->wait(ev, 30000));
  auto b = engine.submit(long_req);
  EXPECT_THROW(engine.submit(long_req), QueueFull);
  a->cancel();
  EXPECT_EQ(collect(*a).finish, "abort");
  b->cancel();
  EXPECT_EQ(collect(*b).finish, "abort");
  SeqRequest ok = mixed_requests(1)[0];
  EXPECT_EQ(collect(*engine.submit(ok)).finish, "length");
  EXPECT_EQ(engine.stats().running, 0);

  SeqRequest bad = ok;
  bad.prompt.clear();
  EXPECT_THROW(engine.submit(bad), Error);
  bad.prompt = {5, 512};
  EXPECT_THROW(engine.submit(bad), Error);
  bad.prompt.assign(4000, 5);
  try {
    engine.submit(bad);
    ADD_FAILURE() << "a prompt as long as the context must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4000 tokens but the context holds 4000"), std::string::npos)
        << e.what();
  }
}

// Quantized checkpoints (tests/data/quant, written by the Python reference quantizer) through the same
// engine: with batch-invariant GEMMs (as `zaya serve` runs), 12 mixed requests batched through 4 slots give
// every token and log-probability of each served alone, bitwise: the streaming kernels' rows never depend on
// the batch, and their many-row path is not taken in that mode.
TEST(Engine, QuantizedModelsBatchInvariant) {
  set_gemm_batch_invariant(true);
  for (const char* v : {"q8_0_all", "mxfp4_experts", "fp8_experts"}) {
    const ZayaModel m = ZayaModel::load(test::data_dir() + "/quant/" + v);
    const std::vector<SeqRequest> reqs = mixed_requests(12);
    std::vector<Result> alone;
    EngineOptions o;
    o.parallel = 1;
    o.ctx_size = 64;
    o.cache_prompt = false;
    {
      Engine engine(m, o);
      for (const SeqRequest& r : reqs) alone.push_back(collect(*engine.submit(r)));
    }
    o.parallel = 4;
    o.batch_tokens = 8;
    Engine engine(m, o);
    std::vector<std::shared_ptr<SeqHandle>> hs;
    for (const SeqRequest& r : reqs) hs.push_back(engine.submit(r));
    for (size_t i = 0; i < reqs.size(); i++) {
      Result got = collect(*hs[i]);
      EXPECT_EQ(got.tokens, alone[i].tokens) << v << " request " << i;
      EXPECT_EQ(got.logprobs, alone[i].logprobs) << v << " request " << i;
    }
  }
  set_gemm_batch_invariant(false);
}
