// The leaf pool: a few threads of our own that run leaf loops (loops whose body starts no more threads: a
// decode product's tiles, norms, elementwise kernels) with a cheaper handoff than an OpenMP region.
//
// Why: libgomp releases every barrier with a futex_wake system call, so an empty 2-thread region
// costs 3.1-3.9 us on the Zen 5 VMs, spinning or not, and a batch-1 ZAYA1-8B decode step enters ~280 of them
// (~9 us a product of ~150 between the fork, the join and the call). Here a waiting worker spins on one word
// for as long as libgomp's threads would (the same OMP_WAIT_POLICY / GOMP_SPINCOUNT), so a job that finds it
// spinning starts with one cache-line transfer and no system call; a worker that has gone to sleep is woken
// with a futex. docs/quantization.md, "OpenMP waits" (the leaf pool).
//
// Only where a LeafPoolScope asks for it: forward calls of a few tokens (decode steps), whose regions are
// small and many. Longer work (prefill, training) stays on OpenMP, whose threads its GEMMs (oneDNN) use: a
// pool worker spinning after its job beside an OpenMP thread spinning after its region would share a core
// (training the small model alternating the two ran 4-5% slower).
//
// Only leaves: a body that starts an OpenMP region or calls oneDNN from a pool worker would build a second
// OpenMP team beside the first (the worker is not inside an OpenMP region, so OpenMP's nesting rule does not
// stop it). in_parallel_region() is true inside a job, so kernels that ask it stay on their thread.
#pragma once

#include <exception>

namespace zaya {

// Whether jobs run on the pool: false when OMP_WAIT_POLICY is ACTIVE (libgomp's threads then spin without
// end after each region and would share the cores with ours; such jobs run in an OpenMP region instead) or
// ZAYA_LEAF_POOL=0.
bool leaf_pool_enabled();

// Spins (one pause each, ~100 a microsecond) a waiting thread makes before it sleeps, as libgomp counts them
// from these two environment variables (nullptr: unset): GOMP_SPINCOUNT where it holds a count (k, M, G, T
// suffixes), else 0 under OMP_WAIT_POLICY=PASSIVE and libgomp's 300000 (~3 ms) when neither is set. -1: no
// end (ACTIVE, GOMP_SPINCOUNT=infinite, or 3e10 and more).
long leaf_pool_spin_count(const char* gomp_spincount, const char* omp_wait_policy);

// Whether the schedulers of core/threads.h send their loops from this thread to the pool: enabled, and
// inside a LeafPoolScope(true).
bool leaf_pool_in_use();

// Marks this thread's work until the end of the scope as running on the pool (use = true) or on OpenMP
// (false); scopes nest, the inner one deciding.
class LeafPoolScope {
 public:
  explicit LeafPoolScope(bool use);
  ~LeafPoolScope();
  LeafPoolScope(const LeafPoolScope&) = delete;
  LeafPoolScope& operator=(const LeafPoolScope&) = delete;

 private:
  bool saved_;
};

// True on a thread that is running a pool job (a worker, or the caller during its own share).
bool in_leaf_pool_job();

// Runs call(ctx, slot) once for every slot in [0, threads): slot 0 on the calling thread, the others on the
// pool's workers, and returns when all have returned. The first exception any slot throws is rethrown here.
// Jobs from different caller threads run one at a time (a second caller waits for the first job to end).
// Requires threads >= 1 and leaf_pool_enabled().
void leaf_pool_run(int threads, void (*call)(void* ctx, int slot), void* ctx);

// leaf_pool_run for a callable fn(slot).
template <typename Fn>
void leaf_pool_run(int threads, const Fn& fn) {
  leaf_pool_run(
      threads, [](void* ctx, int slot) { (*static_cast<const Fn*>(ctx))(slot); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace zaya
