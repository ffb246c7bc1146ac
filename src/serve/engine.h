// The serving engine: continuous batching over up to `parallel` sequences, each with its own CCA state
// (one-row ZayaCache: keys/values, conv state, delayed-value state, sliding-window trimming).
//
// One engine step is one zaya_forward_seqs call over a batch that mixes one decode token of every running
// sequence with prefill chunks of arriving prompts, up to `batch_tokens` tokens; sequences join and leave
// between steps. Each sequence samples with its own Sampler (own seeded RNG) and TokenHistory, so what it
// produces does not depend on what else is being served (bitwise when the GEMMs are batch invariant).
//
// State reuse across turns (`cache_prompt`): when a sequence ends, its state (the cache after its prompt and
// all but its last output token) goes into a bounded LRU (`cache_mb`). A new prompt that extends one of
// those token lists starts from a copy of that state and prefills only the rest.
//
// Threads: submit() and the handles are safe from any thread; the forward runs on the engine's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/sampling.h"
#include "model/zaya.h"

namespace zaya::serve {

struct EngineOptions {
  int64_t parallel = 4;        // sequences in flight at once (slots, each with a ctx_size cache)
  int64_t batch_tokens = 512;  // tokens per engine step: decodes first, prefill chunks fill the rest
  int64_t ctx_size = 4096;     // prompt + output tokens per sequence
  int64_t queue_size = 64;     // requests waiting for a slot; beyond it submit() refuses (HTTP 503)
  bool cache_prompt = true;    // reuse the state of an earlier sequence whose tokens prefix a new prompt
  int64_t cache_mb = 1024;     // bound of the prompt-state LRU
};

// One sequence to generate.
struct SeqRequest {
  std::vector<int32_t> prompt;    // >= 1 token, at most ctx_size - 1
  SamplerConfig sampler;          // per sequence (its own seed)
  int64_t max_tokens = 16;        // new tokens (the context bounds it too)
  std::vector<int32_t> stop_ids;  // ending tokens (included in the output, finish "stop")
  int top_logprobs = -1;          // -1: no log-probabilities; 0-20: the chosen token's and this many more
  bool prompt_logprobs = false;   // log-probabilities of the prompt tokens too (completions with echo)
};

// What a sequence produced, as the engine delivers it.
struct SeqEvent {
  enum class Kind { Token, Done };
  Kind kind = Kind::Token;
  int32_t token = 0;
  float logprob = 0;              // when asked
  std::vector<TokenLogprob> top;  // when asked
  std::string finish_reason;      // Done: stop | length | abort
  double t = 0;                   // seconds since submit
};

// The client side of one sequence: events in order, cancellation.
class SeqHandle {
 public:
  // Waits up to `timeout_ms` for events; appends them to `out`. False when the wait timed out with nothing.
  bool wait(std::vector<SeqEvent>& out, int timeout_ms);
  // Ends the sequence at the engine's next step (finish "abort"); its slot is freed then.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Set once the sequence has been admitted (its prompt was looked up in the state cache).
  int64_t cached_tokens() const { return cached_tokens_; }
  // Prompt log-probabilities (SeqRequest::prompt_logprobs): [prompt.size()], the first is 0 (no context).
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top;

 private:
  friend class Engine;
  void push(SeqEvent e);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SeqEvent> events_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> cached_tokens_{0};
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t steps = 0;
  int64_t prompt_tokens = 0, prefill_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  int64_t cache_entries = 0;
  size_t cache_bytes = 0;
  // Where the engine thread's time goes (cumulative; `zaya bench serve` takes differences). A step is
  // "prefill" when it processes prompt tokens (it may hold decode tokens too), else "decode".
  int64_t prefill_steps = 0, decode_steps = 0;
  int64_t step_tokens = 0, step_seqs = 0;  // summed over steps: tokens and sequences per forward
  int64_t decode_step_seqs = 0;            // summed over decode steps: their batch sizes
  double prefill_step_s = 0,
         decode_step_s = 0;  // wall time of the whole step (forward + sampling + hand-off)
  double forward_s = 0;      // of which in zaya_forward_seqs
  double idle_s = 0;         // waiting for work (nothing running or queued)
};

// Thrown by submit() when the queue is full.
struct QueueFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  // `on_step` (optional) is called on the engine thread after every step with the step's token and
  // sequence counts (metrics).
  using StepHook = std::function<void(int64_t tokens, int64_t seqs)>;
  Engine(const ZayaModel& model, const EngineOptions& opt, StepHook on_step = nullptr);
  ~Engine();  // stops the thread; sequences still running end with "abort"
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a sequence. Throws zaya::Error for a request the engine cannot serve (empty prompt, prompt not
  // shorter than the context, token ids outside the vocabulary) and QueueFull when `queue_size` requests
  // already wait.
  std::shared_ptr<SeqHandle> submit(SeqRequest req);
  EngineStats stats() const;
  const EngineOptions& options() const { return opt_; }
  // Bytes of CCA state per token of context for this model (K and V of every layer, in the cache dtype `kv`:
  // fp32 or bf16), and the fixed bytes per sequence (conv and delayed-value states).
  static size_t bytes_per_token(const ZayaConfig& cfg, DType kv = DType::F32);
  static size_t fixed_bytes_per_seq(const ZayaConfig& cfg);

 private:
  struct Seq;
  struct CacheEntry {
    std::vector<int32_t> tokens;  // the tokens the state has processed
    ZayaCache state;              // compact (capacity = its length)
    size_t bytes = 0;
  };
  void loop();
  void admit_locked();
  void step();
  void finish(Seq& s, const char* reason);
  void cache_store(const Seq& s);
  // The longest cached token list that is a proper prefix of `prompt`; copies its state into `cache`.
  int64_t cache_lookup(const std::vector<int32_t>& prompt, ZayaCache& cache);

  const ZayaModel& model_;
  EngineOptions opt_;
  StepHook on_step_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // admission order
  std::vector<ZayaCache> free_caches_;         // ctx_size caches of finished sequences, reused
  std::list<CacheEntry> lru_;                  // most recent first
  size_t lru_bytes_ = 0;
  EngineStats stats_;
  bool waiting_for_work_ = false;  // the engine thread waits for a sequence (since idle_since_)
  std::chrono::steady_clock::time_point idle_since_;
  ForwardScratch scratch_;
  std::vector<float> logits_;  // [rows, V] of the last step
  std::vector<int64_t> logit_row_;
  std::thread thread_;
};

}  // namespace zaya::serve
