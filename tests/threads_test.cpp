// core/threads.h: the schedulers the kernels run their work items on.
#include "core/threads.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

// Every index runs exactly once, on a slot below the thread count, whatever n and the threads.
TEST(Threads, SharesRunEveryIndexOnce) {
  for (int threads : {1, 2, 3, 4}) {
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(7), size_t(64), size_t(1000)}) {
      std::vector<std::atomic<int>> runs(n);
      std::atomic<int> bad_slot{0};
      zaya::parallel_for_shares(n, threads, [&](size_t i, int slot) {
        runs[i].fetch_add(1);
        if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
      });
      for (size_t i = 0; i < n; i++)
        EXPECT_EQ(runs[i].load(), 1) << "index " << i << " of " << n << ", " << threads << " threads";
      EXPECT_EQ(bad_slot.load(), 0);
    }
  }
}

// A thread that finishes its share takes the slow thread's indices from the back: slot 0's share [0, 4) is
// slow, slot 1's [4, 8) instant, so slot 1 ends up with the last of slot 0's indices, and slot 0 keeps its
// first ones (it walks its share front to back).
TEST(Threads, SharesLetAFreeThreadTakeFromTheBack) {
  std::vector<int> slot_of(8, -1);
  zaya::parallel_for_shares(8, 2, [&](size_t i, int slot) {
    slot_of[i] = slot;
    if (i < 4) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  });
  bool two_threads = false;
  for (int s : slot_of) two_threads |= s == 1;
  if (!two_threads) GTEST_SKIP() << "OpenMP gave this region one thread";
  for (size_t i = 4; i < 8; i++) EXPECT_EQ(slot_of[i], 1) << i;  // slot 0 never reached them
  EXPECT_EQ(slot_of[0], 0);
  EXPECT_EQ(slot_of[3], 1) << "the slow share's last index goes to the free thread";
}

// The first exception fn throws comes out after the region; the other indices still run.
TEST(Threads, SharesCarryTheFirstExceptionOut) {
  std::atomic<int> ran{0};
  EXPECT_THROW(zaya::parallel_for_shares(16, 2,
                                         [&](size_t i, int) {
                                           ran.fetch_add(1);
                                           if (i == 5) throw std::runtime_error("item 5");
                                         }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 16);
}

// parallel_for_static runs every index once: on the leaf pool's or OpenMP's threads when asked (each index
// inside a parallel region), on the calling thread alone when not asked or when called inside a region, and
// without entering a region then (omp_get_level stays where it was, in_parallel_region() false).
TEST(Threads, StaticForRunsEveryIndexOnceAndStaysOutOfARegionWhenSmall) {
  for (bool pool : {false, true}) {
    const zaya::LeafPoolScope scope(pool);
    for (bool parallel : {false, true}) {
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(2), int64_t(7), int64_t(1000)}) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
        std::atomic<int> levels_above{0}, other_threads{0}, inside{0};
        const int level = omp_get_level();
        const std::thread::id caller = std::this_thread::get_id();
        zaya::parallel_for_static(n, parallel, [&](int64_t i) {
          runs[size_t(i)].fetch_add(1);
          if (omp_get_level() > level) levels_above.fetch_add(1);
          if (std::this_thread::get_id() != caller) other_threads.fetch_add(1);
          if (zaya::in_parallel_region()) inside.fetch_add(1);
        });
        for (int64_t i = 0; i < n; i++) EXPECT_EQ(runs[size_t(i)].load(), 1) << "index " << i << " of " << n;
        if (!parallel || n <= 1) {
          EXPECT_EQ(levels_above.load(), 0) << "n " << n << ": a small loop must not enter an OpenMP region";
          EXPECT_EQ(other_threads.load(), 0) << "n " << n;
          EXPECT_EQ(inside.load(), 0) << "n " << n;
        } else {
          EXPECT_EQ(inside.load(), n) << "n " << n << ": asked to, it runs in a region";
          const int64_t openmp_levels = zaya::leaf_pool_in_use() ? 0 : n;  // the pool enters no OpenMP region
          EXPECT_EQ(levels_above.load(), openmp_levels)
              << "n " << n << ", leaf pool " << zaya::leaf_pool_in_use();
          if (zaya::num_threads() > 1) {
            EXPECT_GT(other_threads.load(), 0) << "n " << n << ": on more threads";
          }
        }
      }
    }
  }
  // Inside a threaded region (a kernel called from a work item) the loop stays on its thread.
  std::atomic<int> nested{0};
#pragma omp parallel num_threads(2)
  {
    const std::thread::id me = std::this_thread::get_id();
    const int level = omp_get_level();
    zaya::parallel_for_static(64, true, [&](int64_t) {
      if (std::this_thread::get_id() != me || omp_get_level() != level) nested.fetch_add(1);
    });
  }
  EXPECT_EQ(nested.load(), 0);
}

}  // namespace
