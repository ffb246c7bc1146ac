// Thread-count helpers and the schedulers kernels run their loops on. zaya.cpp's compute threads are
// OpenMP's, and in decode-sized forward calls the leaf pool's (core/thread_pool.h: the same count, a cheaper
// handoff; the two never run at once). oneDNN (Debian build) runs on the same GNU OpenMP runtime, so its
// kernels share OpenMP's threads; OpenBLAS (the pthread build) has its own pool, which we keep at one thread
// and parallelise around ourselves, so that the pools never spin against each other on a small machine.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "core/thread_pool.h"

namespace zaya {

// The OpenMP thread count (OMP_NUM_THREADS or set_num_threads), i.e. threads a top-level kernel may use.
int num_threads();

// Sets the OpenMP thread count for later parallel regions (n >= 1); OpenBLAS stays single-threaded.
void set_num_threads(int n);

// True inside an active OpenMP parallel region or a leaf pool job: a kernel called here must not start more
// threads.
bool in_parallel_region();

// Threads a kernel called from here may use: 1 inside a parallel region, num_threads() outside.
int threads_here();

// fn(i) for every i in [0, n): split statically over OpenMP's threads where `parallel` holds (outside a
// parallel region), else a plain loop on the calling thread that enters no OpenMP region at all. libgomp
// builds and tears down a team of one even for `#pragma omp parallel if (false)`: 1.3 us a region on the Zen
// 5 VMs against 6 ns for the 256-element loop it ran, and a batch-1 ZAYA1-8B decode step ran ~560 of them
// (norms, residual scales, GELU, SwiGLU, the experts' gather and scatter; ~0.7 ms of a ~31 ms step).
// fn must be a leaf (start no threads): the split runs on the leaf pool (core/thread_pool.h) where it is in
// use.
template <typename Fn>
void parallel_for_static(int64_t n, bool parallel, const Fn& fn) {
  if (!parallel || n <= 1 || in_parallel_region()) {
    for (int64_t i = 0; i < n; i++) fn(i);
    return;
  }
  if (leaf_pool_in_use()) {
    const int threads = int(std::min<int64_t>(num_threads(), n));
    // Thread t's share is [n·t / threads, n·(t + 1) / threads), as OpenMP's static schedule splits it.
    leaf_pool_run(threads, [&](int t) {
      for (int64_t i = n * t / threads, end = n * (t + 1) / threads; i < end; i++) fn(i);
    });
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) fn(i);
}

// fn(i, slot) for every i in [0, n): spread over `threads` OpenMP threads, one index at a time (dynamic),
// slot being the thread's number in the region, in [0, threads); or in order on the caller with slot 0 when
// threads <= 1, n <= 1 or already in a parallel region. An exception must not leave an OpenMP region (that
// terminates): the first one fn throws is rethrown here after the region. Kernels fn calls run on their
// thread (threads_here() is 1). Where the leaf pool is in use (core/thread_pool.h), the threads are its own:
// a kernel fn calls stays on its thread there too, and gemm() hands oneDNN one thread.
template <typename Fn>
void parallel_for_dynamic(size_t n, int threads, const Fn& fn) {
  if (threads <= 1 || n <= 1 || in_parallel_region()) {
    for (size_t i = 0; i < n; i++) fn(i, 0);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mu;
  if (leaf_pool_in_use()) {
    std::atomic<size_t> next{0};
    leaf_pool_run(threads, [&](int slot) {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
        try {
          fn(i, slot);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!error) error = std::current_exception();
        }
      }
    });
    if (error) std::rethrow_exception(error);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (size_t i = 0; i < n; i++) {
    try {
      fn(i, omp_get_thread_num());
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// fn(i, slot) for every i in [0, n), each index once, over `threads` OpenMP threads that each walk their own
// contiguous share of [0, n) front to back (thread t starts at t·n / threads) and, when it runs out, take
// indices one at a time from the back of the share with the most left. For work whose consecutive indices
// are consecutive memory (the column tiles of a decode product): each thread reads one stream, as with
// static shares, and the threads end together, as with dynamic scheduling. Dynamic scheduling of a few
// large items (2 a thread) left the threads' ends apart by 11-18% of a batch-1 ZAYA1-8B decode step's
// threaded product time, and many small items interleave the threads' reads,
// which made every item a fresh stream for the prefetchers. Small threads / n, or in a parallel region:
// in order on the caller, slot 0. Exceptions as parallel_for_dynamic. fn must be a leaf (start no threads):
// the threads are the leaf pool's (core/thread_pool.h) where it is in use.
template <typename Fn>
void parallel_for_shares(size_t n, int threads, const Fn& fn) {
  if (threads <= 1 || n <= 1 || in_parallel_region()) {
    for (size_t i = 0; i < n; i++) fn(i, 0);
    return;
  }
  if (n > 0xFFFFFFFFu) return parallel_for_dynamic(n, threads, fn);  // shares hold 32-bit bounds
  threads = int(std::min<size_t>(size_t(threads), n));
  // Share t is [lo, hi) packed into one word (lo in the low half), so that the owner's take from the front
  // and a thief's from the back are each one compare-and-swap on it: every index goes to exactly one taker.
  struct alignas(64) Share {
    std::atomic<uint64_t> range;
  };
  std::unique_ptr<Share[]> shares(new Share[size_t(threads)]);
  for (int t = 0; t < threads; t++) {
    const uint64_t lo = n * size_t(t) / size_t(threads), hi = n * size_t(t + 1) / size_t(threads);
    shares[size_t(t)].range.store(lo | hi << 32, std::memory_order_relaxed);
  }
  // One index off the front (the owner) or the back (a thief) of share s; false once it is empty.
  auto take = [](Share& s, bool back, size_t* i) {
    uint64_t v = s.range.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t lo = v & 0xFFFFFFFFu, hi = v >> 32;
      if (lo >= hi) return false;
      const uint64_t next = back ? lo | (hi - 1) << 32 : (lo + 1) | hi << 32;
      if (s.range.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
        *i = size_t(back ? hi - 1 : lo);
        return true;
      }
    }
  };
  std::exception_ptr error;
  std::mutex error_mu;
  auto run = [&](size_t i, int slot) {
    try {
      fn(i, slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  auto share_and_steal = [&](int slot) {
    size_t i = 0;
    while (take(shares[size_t(slot)], /*back=*/false, &i)) run(i, slot);
    for (;;) {
      // The share with the most indices left (relaxed reads: only a hint; the take decides).
      int victim = -1;
      uint64_t most = 0;
      for (int t = 0; t < threads; t++) {
        const uint64_t v = shares[size_t(t)].range.load(std::memory_order_relaxed);
        const uint64_t lo = v & 0xFFFFFFFFu, hi = v >> 32;
        if (hi > lo && hi - lo > most) most = hi - lo, victim = t;
      }
      if (victim < 0) break;
      if (take(shares[size_t(victim)], /*back=*/true, &i)) run(i, slot);
    }
  };
  if (leaf_pool_in_use()) {
    leaf_pool_run(threads, share_and_steal);
  } else {
#pragma omp parallel num_threads(threads)
    share_and_steal(omp_get_thread_num());
  }
  if (error) std::rethrow_exception(error);
}

// OpenMP's waiting policy, chosen by `zaya` before the runtime starts (apps/zaya/main.cpp) when the user set
// neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: PASSIVE (threads sleep at barriers), plus a short spin of
// kShortSpinCount iterations (~0.1-0.2 ms) when each of our threads has a CPU nobody else is running on.
// Why both: threads that spin share a busy machine badly (small-model training on 2 cores: -12-29% with a
// spin of this length beside one or three busy processes, -55-65% with libgomp's default 3 ms spin), while
// threads that sleep at once pay a futex wake on every parallel region (a ZAYA1-8B decode step runs ~330:
// +10-35% decode tok/s at batch 1 and 4 with the short spin on an idle machine; training, whose regions are
// long, moved within the noise). docs/quantization.md, "OpenMP waits".
constexpr long kShortSpinCount = 10000;

// The machine's runnable tasks now: "procs_running N" of /proc/stat's text; -1 if the line is absent.
int procs_running_from_proc_stat(const std::string& text);

// Whether `threads` OpenMP threads may spin briefly: `others` runnable tasks besides ours leave each of them
// a CPU of the `cpus` this process may run on.
bool short_spin_fits(int others, int threads, int cpus);

// short_spin_fits for this machine now: this process's CPUs and OpenMP threads (OMP_NUM_THREADS, else the
// CPUs; times the node's MPI ranks where they are not bound to CPUs of their own) against /proc/stat's
// runnable tasks less this process's own, sampled up to 50 times over 0.5 s: true at the first sample where
// the CPUs are free. False where /proc/stat is unreadable.
bool machine_idle_for_short_spin();

// The waiting policy this process runs with, for benchmark records: "PASSIVE, GOMP_SPINCOUNT=10000",
// "ACTIVE", "libgomp default" ...
std::string omp_wait_summary();

// Pins OpenBLAS's own pthread pool to one thread (idempotent, thread-safe). Call before any cblas_*.
void ensure_blas_single_threaded();

}  // namespace zaya
