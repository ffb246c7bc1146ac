// What handing work to the other threads costs: an empty job on the leaf pool (core/thread_pool.h) against an
// empty OpenMP region, back to back and after a gap of idle time. Run it under the waiting policy `zaya`
// picks on an idle machine:
//   OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000 build/bench/threads_bench
// (under plain PASSIVE every handoff sleeps; under libgomp's default both spin ~3 ms).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/thread_pool.h"
#include "core/threads.h"

namespace {

std::atomic<int> g_sink{0};

// An empty job on every thread; arg 0: back to back, else this many microseconds idle (untimed) before each
// job, so that waiting threads have spun a while or gone to sleep.
void BM_EmptyJob(benchmark::State& state, bool pool) {
  const int threads = zaya::num_threads();
  const auto gap = std::chrono::microseconds(state.range(0));
  for (auto _ : state) {
    if (gap.count() > 0) {
      state.PauseTiming();
      const auto until = std::chrono::steady_clock::now() + gap;
      while (std::chrono::steady_clock::now() < until) {
      }
      state.ResumeTiming();
    }
    if (pool) {
      zaya::leaf_pool_run(threads, [](int slot) { g_sink.fetch_add(slot, std::memory_order_relaxed); });
    } else {
#pragma omp parallel num_threads(threads)
      g_sink.fetch_add(omp_get_thread_num(), std::memory_order_relaxed);
    }
  }
  state.counters["threads"] = threads;
}
BENCHMARK_CAPTURE(BM_EmptyJob, leaf_pool, true)->Arg(0)->Arg(20)->Arg(1000)->UseRealTime();
BENCHMARK_CAPTURE(BM_EmptyJob, openmp, false)->Arg(0)->Arg(20)->Arg(1000)->UseRealTime();

}  // namespace
