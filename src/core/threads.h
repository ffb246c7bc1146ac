// Thread-count helpers. zaya.cpp has one pool of compute threads: OpenMP's. oneDNN (Debian build) runs on
// the same GNU OpenMP runtime, so its kernels share our pool; OpenBLAS (the pthread build) has its own
// pool, which we keep at one thread and parallelise around with OpenMP ourselves, so that the two pools
// never spin against each other on a small machine.
#pragma once

#include <omp.h>

#include <cstddef>
#include <exception>
#include <mutex>

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

// Pins OpenBLAS's own pthread pool to one thread (idempotent, thread-safe). Call before any cblas_*.
void ensure_blas_single_threaded();

}  // namespace zaya
