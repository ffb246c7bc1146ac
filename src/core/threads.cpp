#include "core/threads.h"

#include <omp.h>

#include <mutex>

#include "core/error.h"

// From OpenBLAS (cblas.h declares it too, but we keep core/ free of the BLAS header).
extern "C" void openblas_set_num_threads(int num_threads);

namespace zaya {

int num_threads() {
  return omp_get_max_threads();
}

void set_num_threads(int n) {
  ZAYA_CHECK(n >= 1, "thread count must be at least 1, got ", n);
  ensure_blas_single_threaded();
  omp_set_num_threads(n);
}

bool in_parallel_region() {
  return omp_in_parallel() != 0;
}

int threads_here() {
  return in_parallel_region() ? 1 : num_threads();
}

void ensure_blas_single_threaded() {
  // OpenBLAS's pthread workers busy-wait after each call; with more than one of them they would steal the
  // cores our OpenMP threads need next. One thread plus our own OpenMP split measured as fast or faster.
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace zaya
