// Thread-count helpers. zaya.cpp has one pool of compute threads: OpenMP's. oneDNN (Debian build) runs on
// the same GNU OpenMP runtime, so its kernels share our pool; OpenBLAS (the pthread build) has its own
// pool, which we keep at one thread and parallelise around with OpenMP ourselves, so that the two pools
// never spin against each other on a small machine.
#pragma once

namespace zaya {

// The OpenMP thread count (OMP_NUM_THREADS or set_num_threads), i.e. threads a top-level kernel may use.
int num_threads();

// Sets the OpenMP thread count for later parallel regions (n >= 1); OpenBLAS stays single-threaded.
void set_num_threads(int n);

// True inside an active OpenMP parallel region: a kernel called here must not start more threads.
bool in_parallel_region();

// Threads a kernel called from here may use: 1 inside a parallel region, num_threads() outside.
int threads_here();

// Pins OpenBLAS's own pthread pool to one thread (idempotent, thread-safe). Call before any cblas_*.
void ensure_blas_single_threaded();

}  // namespace zaya
