#include "serve/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/profile.h"

namespace zaya::serve {

using Clock = std::chrono::steady_clock;

struct Engine::Seq {
  SeqRequest req;
  std::shared_ptr<SeqHandle> handle;
  Clock::time_point t_submit;
  ZayaCache cache;  // one row, ctx_size keys reserved
  std::unique_ptr<Sampler> sampler;
  TokenHistory history;
  std::vector<int32_t> fed;  // tokens the cache has processed (prompt, then outputs but the last)
  std::vector<int32_t> out;  // generated tokens
  int64_t prompt_done = 0;   // prompt tokens processed
  int64_t max_new = 0;       // new tokens allowed (max_tokens, bounded by the context)
  bool finished = false;
  SeqEvent done;  // delivered once the step's statistics include this sequence's end
  bool prefilled() const { return prompt_done == int64_t(req.prompt.size()); }
};

// ---- SeqHandle ----

void SeqHandle::push(SeqEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool SeqHandle::wait(std::vector<SeqEvent>& out, int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); }))
    return false;
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

// ---- Engine ----

size_t Engine::bytes_per_token(const ZayaConfig& cfg, DType kv) {
  const size_t elem = kv == DType::BF16 ? sizeof(uint16_t) : sizeof(float);
  return size_t(cfg.num_hidden_layers) * 2 * cfg.num_key_value_heads * cfg.head_dim * elem;
}

size_t Engine::fixed_bytes_per_seq(const ZayaConfig& cfg) {
  return size_t(cfg.num_hidden_layers) * (cfg.conv_state_len() * cfg.conv_channels() + cfg.kv_dim() / 2) *
         sizeof(float);
}

Engine::Engine(const ZayaModel& model, const EngineOptions& opt, StepHook on_step)
    : model_(model), opt_(opt), on_step_(std::move(on_step)) {
  ZAYA_CHECK(opt.parallel >= 1, "--parallel must be at least 1, got ", opt.parallel);
  ZAYA_CHECK(opt.batch_tokens >= opt.parallel, "--batch-tokens (", opt.batch_tokens,
             ") must be at least --parallel (", opt.parallel, "): every running sequence decodes each step");
  ZAYA_CHECK(opt.ctx_size >= 2, "--ctx-size must be at least 2, got ", opt.ctx_size);
  ZAYA_CHECK(opt.queue_size >= 0, "--queue-size must be non-negative, got ", opt.queue_size);
  ZAYA_CHECK(opt.cache_mb >= 0, "--cache-mb must be non-negative, got ", opt.cache_mb);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  SeqEvent done;
  done.kind = SeqEvent::Kind::Done;
  done.finish_reason = "abort";
  for (auto& s : running_) s->handle->push(done);
  for (auto& s : waiting_) s->handle->push(done);
}

std::shared_ptr<SeqHandle> Engine::submit(SeqRequest req) {
  const int64_t n = int64_t(req.prompt.size()), V = model_.cfg.vocab_size;
  ZAYA_CHECK(n >= 1, "the prompt is empty: a sequence needs at least one token");
  ZAYA_CHECK(n < opt_.ctx_size, "the prompt has ", n, " tokens but the context holds ", opt_.ctx_size,
             " (prompt and output together): shorten the prompt or raise --ctx-size");
  for (int64_t i = 0; i < n; i++)
    ZAYA_CHECK(req.prompt[i] >= 0 && req.prompt[i] < V, "prompt token ", i, " is ", req.prompt[i],
               ", outside the vocabulary [0, ", V, ")");
  ZAYA_CHECK(req.top_logprobs <= 20, "top_logprobs is at most 20, got ", req.top_logprobs);
  auto s = std::make_unique<Seq>();
  s->handle = std::make_shared<SeqHandle>();
  s->t_submit = Clock::now();
  s->max_new = opt_.ctx_size - n;
  if (req.max_tokens >= 0) s->max_new = std::min(s->max_new, req.max_tokens);
  s->sampler = std::make_unique<Sampler>(req.sampler);
  s->history.add_prompt(req.prompt.data(), n);
  s->req = std::move(req);
  std::shared_ptr<SeqHandle> h = s->handle;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (int64_t(waiting_.size()) >= opt_.queue_size && int64_t(running_.size()) >= opt_.parallel)
      throw QueueFull("the queue is full: " + std::to_string(waiting_.size()) + " requests wait for " +
                      std::to_string(opt_.parallel) + " slots");
    waiting_.push_back(std::move(s));
    stats_.waiting = int64_t(waiting_.size());
  }
  cv_.notify_all();
  return h;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats st = stats_;
  if (waiting_for_work_)  // the wait in progress counts up to now
    st.idle_s += std::chrono::duration<double>(Clock::now() - idle_since_).count();
  return st;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      idle_since_ = Clock::now();
      waiting_for_work_ = true;
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      waiting_for_work_ = false;
      stats_.idle_s += std::chrono::duration<double>(Clock::now() - idle_since_).count();
      if (stop_) return;
      admit_locked();
    }
    step();
  }
}

void Engine::admit_locked() {
  ZAYA_PROFILE_SCOPE("serve_admit");
  while (int64_t(running_.size()) < opt_.parallel && !waiting_.empty()) {
    std::unique_ptr<Seq> s = std::move(waiting_.front());
    waiting_.pop_front();
    if (s->handle->cancelled()) {
      SeqEvent done;
      done.kind = SeqEvent::Kind::Done;
      done.finish_reason = "abort";
      s->handle->push(done);
      continue;
    }
    if (!free_caches_.empty()) {
      s->cache = std::move(free_caches_.back());
      free_caches_.pop_back();
      s->cache.reset();
    } else {
      s->cache = ZayaCache(model_.cfg, 1);
      s->cache.reserve(model_.cfg, opt_.ctx_size);  // the slot's whole context, allocated once
    }
    const int64_t reused = opt_.cache_prompt ? cache_lookup(s->req.prompt, s->cache) : 0;
    s->prompt_done = reused;
    s->fed.assign(s->req.prompt.begin(), s->req.prompt.begin() + reused);
    s->handle->cached_tokens_ = reused;
    if (s->req.prompt_logprobs) {
      s->handle->prompt_logprobs.assign(s->req.prompt.size(), 0.f);
      s->handle->prompt_top.assign(s->req.prompt.size(), {});
    }
    stats_.prompt_tokens += int64_t(s->req.prompt.size());
    stats_.cached_tokens += reused;
    running_.push_back(std::move(s));
  }
  stats_.running = int64_t(running_.size());
  stats_.waiting = int64_t(waiting_.size());
}

int64_t Engine::cache_lookup(const std::vector<int32_t>& prompt, ZayaCache& cache) {
  auto best = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const auto& t = it->tokens;
    // A proper prefix: the last prompt token must still run to give the first output's logits.
    if (t.size() >= prompt.size() || (best != lru_.end() && t.size() <= best->tokens.size())) continue;
    if (std::equal(t.begin(), t.end(), prompt.begin())) best = it;
  }
  if (best == lru_.end()) return 0;
  cache.assign_state(model_.cfg, best->state);
  lru_.splice(lru_.begin(), lru_, best);  // most recently used
  return int64_t(lru_.front().tokens.size());
}

void Engine::cache_store(const Seq& s) {
  if (!opt_.cache_prompt || s.fed.empty()) return;
  ZAYA_PROFILE_SCOPE("serve_cache_store");
  // A stored list that the new one extends (or equals) is superseded by it.
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->tokens.size() <= s.fed.size() &&
        std::equal(it->tokens.begin(), it->tokens.end(), s.fed.begin())) {
      lru_bytes_ -= it->bytes;
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
  CacheEntry e;
  e.tokens = s.fed;
  e.state = s.cache.compact_copy(model_.cfg);
  e.bytes = e.state.bytes() + e.tokens.size() * sizeof(int32_t);
  const size_t limit = size_t(opt_.cache_mb) << 20;
  if (e.bytes > limit) return;
  lru_bytes_ += e.bytes;
  lru_.push_front(std::move(e));
  while (lru_bytes_ > limit) {
    lru_bytes_ -= lru_.back().bytes;
    lru_.pop_back();
  }
}

void Engine::finish(Seq& s, const char* reason) {
  s.finished = true;
  s.done.kind = SeqEvent::Kind::Done;
  s.done.finish_reason = reason;
  s.done.t = std::chrono::duration<double>(Clock::now() - s.t_submit).count();
  std::lock_guard<std::mutex> lk(mu_);
  cache_store(s);
}

void Engine::step() {
  const int64_t V = model_.cfg.vocab_size;
  const auto t_step = Clock::now();
  double forward_s = 0;
  // Cancelled sequences leave first.
  for (auto& s : running_)
    if (s->handle->cancelled()) finish(*s, "abort");

  // The batch: a decode token for every prefilled sequence, then prefill chunks in admission order.
  std::vector<SeqStep> batch;
  std::vector<Seq*> who;
  int64_t budget = opt_.batch_tokens;
  for (auto& s : running_) {
    if (s->finished || !s->prefilled()) continue;
    batch.push_back({&s->cache, &s->out.back(), 1, 1});
    who.push_back(s.get());
    budget--;
  }
  for (auto& s : running_) {
    if (s->finished || s->prefilled() || budget <= 0) continue;
    const int64_t left = int64_t(s->req.prompt.size()) - s->prompt_done;
    const int64_t n = std::min(left, budget);
    const int64_t logits = s->req.prompt_logprobs ? n : (n == left ? 1 : 0);
    batch.push_back({&s->cache, s->req.prompt.data() + s->prompt_done, n, logits});
    who.push_back(s.get());
    budget -= n;
  }

  std::vector<float>& logits = logits_;
  std::vector<int64_t>& rows = logit_row_;
  int64_t step_tokens = 0;
  if (!batch.empty()) {
    try {
      const auto t0 = Clock::now();
      zaya_forward_seqs(model_, batch, logits, rows, scratch_);
      forward_s = std::chrono::duration<double>(Clock::now() - t0).count();
    } catch (const std::exception& ex) {
      // Not expected (submit() validated the tokens): end the step's sequences rather than the server.
      std::fprintf(stderr, "zaya serve: engine step failed, ending its %zu sequences: %s\n", batch.size(),
                   ex.what());
      for (Seq* s : who) finish(*s, "abort");
      batch.clear();
    }
    for (const SeqStep& e : batch) step_tokens += e.n;
  }

  int64_t generated = 0, prefill = 0;
  for (size_t i = 0; i < batch.size(); i++) {
    Seq& s = *who[i];
    const SeqStep& e = batch[i];
    const float* row = logits.data() + rows[i] * V;
    if (!s.prefilled()) {
      // Prompt log-probabilities: logits at prompt position p score token p + 1.
      for (int64_t j = 0; s.req.prompt_logprobs && j < e.n; j++) {
        const int64_t p = s.prompt_done + j;
        if (p + 1 >= int64_t(s.req.prompt.size())) break;
        std::vector<TokenLogprob>* top = s.req.top_logprobs > 0 ? &s.handle->prompt_top[p + 1] : nullptr;
        s.handle->prompt_logprobs[p + 1] =
            token_logprobs(row + j * V, V, s.req.prompt[p + 1], std::max(s.req.top_logprobs, 0), top);
      }
      s.fed.insert(s.fed.end(), e.ids, e.ids + e.n);
      s.prompt_done += e.n;
      prefill += e.n;
      if (!s.prefilled()) continue;
      if (s.max_new == 0) {  // scoring only (max_tokens 0)
        finish(s, "length");
        continue;
      }
      row += (e.logits - 1) * V;  // the last prompt position predicts the first output
    } else {
      s.fed.push_back(s.out.back());
    }
    SeqEvent ev;
    {
      ZAYA_PROFILE_SCOPE("serve_sample");
      ev.token = s.sampler->sample(row, V, &s.history);
    }
    s.history.add_generated(ev.token);
    s.out.push_back(ev.token);
    if (s.req.top_logprobs >= 0)
      ev.logprob =
          token_logprobs(row, V, ev.token, s.req.top_logprobs, s.req.top_logprobs > 0 ? &ev.top : nullptr);
    ev.t = std::chrono::duration<double>(Clock::now() - s.t_submit).count();
    s.handle->push(ev);
    generated++;
    const auto& stop = s.req.stop_ids;
    if (std::find(stop.begin(), stop.end(), ev.token) != stop.end())
      finish(s, "stop");
    else if (int64_t(s.out.size()) >= s.max_new)
      finish(s, "length");
  }

  // Finished sequences leave; their caches serve the next admissions. Their end is delivered after the
  // statistics count it (a client that saw "done" sees the engine without it).
  std::vector<std::unique_ptr<Seq>> ended;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->finished) {
        free_caches_.push_back(std::move((*it)->cache));
        ended.push_back(std::move(*it));
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    if (!batch.empty()) {
      stats_.steps++;
      const double step_s = std::chrono::duration<double>(Clock::now() - t_step).count();
      if (prefill > 0) {
        stats_.prefill_steps++;
        stats_.prefill_step_s += step_s;
      } else {
        stats_.decode_steps++;
        stats_.decode_step_s += step_s;
        stats_.decode_step_seqs += int64_t(batch.size());
      }
      stats_.step_tokens += step_tokens;
      stats_.step_seqs += int64_t(batch.size());
      stats_.forward_s += forward_s;
    }
    stats_.prefill_tokens += prefill;
    stats_.generated_tokens += generated;
    stats_.running = int64_t(running_.size());
    stats_.waiting = int64_t(waiting_.size());
    stats_.cache_entries = int64_t(lru_.size());
    stats_.cache_bytes = lru_bytes_;
  }
  for (auto& s : ended) s->handle->push(std::move(s->done));
  if (on_step_ && step_tokens > 0) on_step_(step_tokens, int64_t(batch.size()));
}

}  // namespace zaya::serve
