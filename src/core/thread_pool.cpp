#include "core/thread_pool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace zaya {
namespace {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

bool equals_lower(const char* text, const char* value) {
  if (!text) return false;
  std::string s(text);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s == value;
}

long spin_count_from_env() {
  return leaf_pool_spin_count(std::getenv("GOMP_SPINCOUNT"), std::getenv("OMP_WAIT_POLICY"));
}

// The pool: one job at a time, published as `state_` (generation << 16 | threads). Worker w (1-based) runs
// slot w of a job whose threads exceed w; the caller runs slot 0 and waits until `pending_` (the workers'
// slots still running) is 0. A worker spins on `state_` for spin_ pauses after its last job, then sleeps on
// its own futex word, which only a job that includes it wakes; a worker that sees a job without it sleeps at
// once (it is not in use at this thread count), so that it neither spins beside the threads in use nor costs
// their jobs a wake.
class LeafPool {
 public:
  explicit LeafPool(long spin) : spin_(spin) {}

  void run(int threads, void (*call)(void*, int), void* ctx) {
    std::lock_guard<std::mutex> lock(run_mu_);
    while (int(workers_.size()) < threads - 1) start_worker();
    call_ = call;
    ctx_ = ctx;
    error_ = nullptr;
    pending_.store(uint32_t(threads - 1), std::memory_order_relaxed);
    generation_++;
    state_.store(generation_ << 16 | uint64_t(threads), std::memory_order_seq_cst);
    for (int w = 1; w < threads; w++) {
      Worker& worker = *workers_[size_t(w - 1)];
      // A plain read first: a spinning worker's word stays 0, and its line stays shared, not stolen.
      if (worker.sleeping.load(std::memory_order_seq_cst) != 0 &&
          worker.sleeping.exchange(0, std::memory_order_seq_cst) != 0)
        futex_wake_all(&worker.sleeping);
    }
    run_slot(0);
    // The join: spin as a worker would, then sleep until the last worker's slot wakes us.
    for (long i = 0; pending_.load(std::memory_order_acquire) != 0; i++) {
      if (i < std::max(spin_, 20000L)) {
        _mm_pause();
        continue;
      }
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      for (uint32_t p; (p = pending_.load(std::memory_order_seq_cst)) != 0;) futex_wait(&pending_, p);
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
    if (error_) std::rethrow_exception(error_);
  }

  static thread_local bool t_in_job;

 private:
  struct alignas(64) Worker {
    std::atomic<uint32_t> sleeping{0};  // 1 while the worker waits on this word
  };

  void start_worker() {
    workers_.push_back(std::make_unique<Worker>());
    const int slot = int(workers_.size());
    Worker* me = workers_.back().get();
    const uint64_t seen = state_.load(std::memory_order_relaxed);
    std::thread([this, slot, me, seen] { work(slot, me, seen); }).detach();
  }

  // An OpenMP region a slot's body enters anyway runs a team of one: outside a region OpenMP's nesting rule
  // would not stop it, and it would start its threads beside ours.
  void run_slot(int slot) {
    t_in_job = true;  // reset below: the slot's exceptions are caught
    const int omp_threads = omp_get_max_threads();
    if (omp_threads != 1) omp_set_num_threads(1);
    try {
      call_(ctx_, slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (omp_threads != 1) omp_set_num_threads(omp_threads);
    t_in_job = false;
  }

  bool includes(uint64_t state, int slot) const { return int(state & 0xFFFF) > slot; }

  void work(int slot, Worker* me, uint64_t seen) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      for (long i = 0; s == seen && (spin_ < 0 || i < spin_); i++) {
        _mm_pause();
        s = state_.load(std::memory_order_acquire);
      }
      if (s == seen || !includes(s, slot)) {
        seen = s;
        for (;;) {
          // Announce the sleep before the last look at state_: a caller that publishes after this look sees
          // the 1 and wakes us; one that published before it is seen here.
          me->sleeping.store(1, std::memory_order_seq_cst);
          s = state_.load(std::memory_order_seq_cst);
          if (s != seen && includes(s, slot)) break;
          futex_wait(&me->sleeping, 1);
        }
        me->sleeping.store(0, std::memory_order_relaxed);
      }
      seen = s;
      run_slot(slot);
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping_.load(std::memory_order_seq_cst) != 0)
        futex_wake_all(&pending_);
    }
  }

  const long spin_;
  std::mutex run_mu_;
  std::vector<std::unique_ptr<Worker>> workers_;  // under run_mu_; worker w's word is workers_[w - 1]
  uint64_t generation_ = 0;                       // under run_mu_
  std::exception_ptr error_;
  std::mutex error_mu_;
  // The job in one line with the word workers spin on, so that a spinning worker takes one line to start it.
  alignas(64) std::atomic<uint64_t> state_{0};
  void (*call_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> pending_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
};

thread_local bool LeafPool::t_in_job = false;

// The process's pool, made on first use and never destroyed (its detached workers may still be waiting at
// exit). A child after fork() has none of the parent's workers, so it makes its own.
std::atomic<LeafPool*> g_pool{nullptr};

LeafPool& pool() {
  LeafPool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, [] { g_pool.store(nullptr); }); });
  auto* made = new LeafPool(spin_count_from_env());  // no threads until its first job
  if (g_pool.compare_exchange_strong(p, made, std::memory_order_acq_rel)) return *made;
  delete made;  // another thread made it first
  return *p;
}

}  // namespace

long leaf_pool_spin_count(const char* gomp_spincount, const char* omp_wait_policy) {
  if (gomp_spincount) {
    if (equals_lower(gomp_spincount, "infinite") || equals_lower(gomp_spincount, "infinity")) return -1;
    char* end = nullptr;
    const double v = std::strtod(gomp_spincount, &end);
    if (end != gomp_spincount && v >= 0) {
      double scale = 1;  // libgomp reads k, M, G and T suffixes
      if (*end == 'k' || *end == 'K') scale = 1e3;
      if (*end == 'M') scale = 1e6;
      if (*end == 'G') scale = 1e9;
      if (*end == 'T') scale = 1e12;
      return v * scale >= 3e10 ? -1 : long(v * scale);  // libgomp's ACTIVE count and beyond: no end
    }
  }
  if (equals_lower(omp_wait_policy, "active")) return -1;
  if (equals_lower(omp_wait_policy, "passive")) return 0;
  return 300000;
}

bool leaf_pool_enabled() {
  static const bool enabled = spin_count_from_env() >= 0 && !equals_lower(std::getenv("ZAYA_LEAF_POOL"), "0");
  return enabled;
}

namespace {
thread_local bool t_scope_uses_pool = false;
}  // namespace

bool leaf_pool_in_use() {
  return t_scope_uses_pool && leaf_pool_enabled();
}

LeafPoolScope::LeafPoolScope(bool use) : saved_(t_scope_uses_pool) {
  t_scope_uses_pool = use;
}

LeafPoolScope::~LeafPoolScope() {
  t_scope_uses_pool = saved_;
}

bool in_leaf_pool_job() {
  return LeafPool::t_in_job;
}

void leaf_pool_run(int threads, void (*call)(void*, int), void* ctx) {
  ZAYA_CHECK(threads >= 1 && threads <= 0xFFFF, "leaf pool: thread count must be in [1, 65535], got ",
             threads);
  if (threads == 1 || LeafPool::t_in_job) {
    // One thread, or a job started from inside a job (its caller would wait on the pool it occupies): every
    // slot in order on this thread.
    const bool outer = LeafPool::t_in_job;
    const int omp_threads = omp_get_max_threads();
    LeafPool::t_in_job = true;
    if (omp_threads != 1) omp_set_num_threads(1);  // as LeafPool::run_slot
    struct Restore {
      bool was;
      int omp_threads;
      ~Restore() {
        LeafPool::t_in_job = was;
        if (omp_threads != 1) omp_set_num_threads(omp_threads);
      }
    } restore{outer, omp_threads};
    for (int slot = 0; slot < threads; slot++) call(ctx, slot);
    return;
  }
  pool().run(threads, call, ctx);
}

}  // namespace zaya
