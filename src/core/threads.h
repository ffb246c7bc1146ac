// Thread-count helpers. zaya.cpp has one pool of compute threads: OpenMP's. oneDNN (Debian build) runs on
// the same GNU OpenMP runtime, so its kernels share our pool; OpenBLAS (the pthread build) has its own
// pool, which we keep at one thread and parallelise around with OpenMP ourselves, so that the two pools
// never spin against each other on a small machine.
#pragma once

#include <omp.h>

#include <cstddef>
#include <exception>
#include <mutex>
#include <string>

namespace zaya {

// The OpenMP thread count (OMP_NUM_THREADS or set_num_threads), i.e. threads a top-level kernel may use.
int num_threads();

// Sets the OpenMP thread count for later parallel regions (n >= 1); OpenBLAS stays single-threaded.
void set_num_threads(int n);

// True inside an active OpenMP parallel region: a kernel called here must not start more threads.
bool in_parallel_region();

// Threads a kernel called from here may use: 1 inside a parallel region, num_threads() outside.
int threads_here();

// fn(i, slot) for every i in [0, n): spread over `threads` OpenMP threads, one index at a time (dynamic),
// slot being the thread's number in the region, in [0, threads); or in order on the caller with slot 0 when
// threads <= 1 or n <= 1. An exception must not leave an OpenMP region (that terminates): the first one fn
// throws is rethrown here after the region. Kernels fn calls run on their thread (threads_here() is 1).
template <typename Fn>
void parallel_for_dynamic(size_t n, int threads, const Fn& fn) {
  if (threads <= 1 || n <= 1) {
    for (size_t i = 0; i < n; i++) fn(i, 0);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mu;
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

// OpenMP's waiting policy, chosen by `zaya` before the runtime starts (apps/zaya/main.cpp) when the user set
// neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: PASSIVE (threads sleep at barriers), plus a short spin of
// kShortSpinCount iterations (~0.1-0.2 ms) when each of our threads has a CPU nobody else is running on.
// Why both: threads that spin share a busy machine badly (small-model training on 2 cores: -12-29% with a spin
// of this length beside one or three busy processes, -55-65% with libgomp's default 3 ms spin), while threads
// that sleep at once pay a futex wake on every parallel region (a ZAYA1-8B decode step runs ~330: +10-35%
// decode tok/s at batch 1 and 4 with the short spin on an idle machine; training, whose regions are long, moved
// within the noise). docs/quantization.md, "OpenMP waits".
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
