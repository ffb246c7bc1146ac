// core/thread_pool.h: the leaf pool's jobs run every slot once, on distinct threads, hand over without losing
// a wake (spinning or sleeping workers), carry exceptions out, and survive nesting, concurrent callers and
// fork.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/threads.h"

namespace {

// Every slot runs once per job: slot 0 on the caller, the others each on a thread of its own; inside, the
// thread counts as in a parallel region (kernels called there stay on it), and after the job it does not.
TEST(LeafPool, RunsEverySlotOnceOnItsOwnThread) {
  alarm(120);  // a worker never woken ends the binary here (SIGALRM) instead of at CTest's 600 s
  for (int threads : {1, 2, 3, 4, 2}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(threads));
    std::vector<std::thread::id> ids(static_cast<size_t>(threads));
    std::atomic<int> outside{0};
    zaya::leaf_pool_run(threads, [&](int slot) {
      runs[size_t(slot)].fetch_add(1);
      ids[size_t(slot)] = std::this_thread::get_id();
      if (!zaya::in_parallel_region() || zaya::threads_here() != 1) outside.fetch_add(1);
    });
    for (int s = 0; s < threads; s++)
      EXPECT_EQ(runs[size_t(s)].load(), 1) << "slot " << s << " of " << threads;
    EXPECT_EQ(ids[0], std::this_thread::get_id()) << "slot 0 runs on the caller";
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), size_t(threads)) << threads;
    EXPECT_EQ(outside.load(), 0) << "a slot must count as inside a parallel region";
    EXPECT_FALSE(zaya::in_leaf_pool_job());
  }
  alarm(0);
}

// Many jobs back to back, with gaps from none (the worker still spinning) to 2 ms (asleep under a short spin
// or PASSIVE): every job sees both slots run and returns only after both did. A lost wake hangs here, and a
// join that returns early shows as a slot's count behind.
TEST(LeafPool, HandsOverWithoutLosingAWake) {
  alarm(120);  // a lost wake ends the test binary here (SIGALRM) instead of at CTest's 600 s
  std::mt19937 rng(7);
  std::atomic<int64_t> sum{0};
  int64_t expect = 0;
  for (int job = 0; job < 3000; job++) {
    const int gap_us = job % 100 == 0 ? 2000 : int(rng() % 4) == 0 ? int(rng() % 300) : 0;
    if (gap_us) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    zaya::leaf_pool_run(2, [&](int slot) {
      if (slot == 1) std::this_thread::yield();  // the worker's share ends late now and then
      sum.fetch_add(job + slot, std::memory_order_relaxed);
    });
    expect += 2 * job + 1;
    ASSERT_EQ(sum.load(), expect) << "job " << job << " returned before its slots ran";
  }
  alarm(0);
}

// The first exception a slot throws comes out of leaf_pool_run after every slot has run; the pool runs the
// next job as usual.
TEST(LeafPool, CarriesTheFirstExceptionOut) {
  std::atomic<int> ran{0};
  for (int thrower : {0, 1}) {
    ran = 0;
    EXPECT_THROW(zaya::leaf_pool_run(3,
                                     [&](int slot) {
                                       ran.fetch_add(1);
                                       if (slot == thrower) throw std::runtime_error("slot failed");
                                     }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 3);
    EXPECT_FALSE(zaya::in_leaf_pool_job()) << "the thrower's slot must not stay marked as in a job";
  }
  ran = 0;
  zaya::leaf_pool_run(3, [&](int) { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 3);
}

// A job started inside a job runs all its slots in order on that slot's thread (the pool is busy with the
// outer one), and parallel_for_static / parallel_for_shares called there stay on it.
TEST(LeafPool, NestedJobsStayOnTheirThread) {
  std::atomic<int> moved{0}, inner_runs{0};
  zaya::leaf_pool_run(2, [&](int) {
    const std::thread::id me = std::this_thread::get_id();
    zaya::leaf_pool_run(3, [&](int) {
      inner_runs.fetch_add(1);
      if (std::this_thread::get_id() != me) moved.fetch_add(1);
    });
    zaya::parallel_for_static(100, true, [&](int64_t) {
      if (std::this_thread::get_id() != me) moved.fetch_add(1);
    });
    zaya::parallel_for_shares(100, 2, [&](size_t, int) {
      if (std::this_thread::get_id() != me) moved.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_runs.load(), 6);
  EXPECT_EQ(moved.load(), 0);
}

// Two caller threads share the pool: their jobs run one at a time, each complete.
TEST(LeafPool, ConcurrentCallersEachGetWholeJobs) {
  std::atomic<int> bad{0};
  auto caller = [&](int base) {
    for (int job = 0; job < 500; job++) {
      std::atomic<int> runs{0};
      zaya::leaf_pool_run(2, [&](int slot) { runs.fetch_add(base + slot); });
      if (runs.load() != 2 * base + 1) bad.fetch_add(1);
    }
  };
  std::thread a(caller, 10), b(caller, 1000);
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
}

// A child after fork() has none of the parent's workers; its first job makes a pool of its own.
TEST(LeafPool, WorksInAForkedChild) {
  zaya::leaf_pool_run(2, [](int) {});  // the parent's pool exists before the fork
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);  // a job waiting on the parent's workers, which the child lacks, ends it by SIGALRM
    std::atomic<int> runs{0};
    for (int job = 0; job < 100; job++) zaya::leaf_pool_run(2, [&](int) { runs.fetch_add(1); });
    _exit(runs.load() == 200 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The pool is in use only inside a scope that asks for it (scopes nest), and then parallel_for_dynamic runs
// on it too; an OpenMP pragma inside a job runs a team of one (no threads beside the pool's).
TEST(LeafPool, UsedOnlyInsideAScopeAndKeepsOpenMPToOneThread) {
  EXPECT_FALSE(zaya::leaf_pool_in_use());
  {
    const zaya::LeafPoolScope on(true);
    EXPECT_EQ(zaya::leaf_pool_in_use(), zaya::leaf_pool_enabled());
    {
      const zaya::LeafPoolScope off(false);
      EXPECT_FALSE(zaya::leaf_pool_in_use());
    }
    EXPECT_EQ(zaya::leaf_pool_in_use(), zaya::leaf_pool_enabled());
    std::vector<std::atomic<int>> runs(100);
    std::atomic<int> omp_teams_above_one{0}, in_omp{0};
    zaya::parallel_for_dynamic(runs.size(), 2, [&](size_t i, int) {
      runs[i].fetch_add(1);
      if (omp_in_parallel()) in_omp.fetch_add(1);
#pragma omp parallel if (i % 10 == 0)
      {
#pragma omp single
        if (omp_get_num_threads() > 1) omp_teams_above_one.fetch_add(1);
      }
    });
    for (size_t i = 0; i < runs.size(); i++) EXPECT_EQ(runs[i].load(), 1) << i;
    EXPECT_EQ(omp_teams_above_one.load(), 0) << "a region inside a job must stay on its thread";
    if (zaya::leaf_pool_enabled()) {
      EXPECT_EQ(in_omp.load(), 0) << "dynamic loops in a scope run on the pool";
    }
  }
  EXPECT_FALSE(zaya::leaf_pool_in_use());
  EXPECT_GT(omp_get_max_threads(), 0);
}

// The spin counts libgomp would use, read from the same two variables.
TEST(LeafPool, SpinCountFollowsLibgomp) {
  EXPECT_EQ(zaya::leaf_pool_spin_count(nullptr, nullptr), 300000);
  EXPECT_EQ(zaya::leaf_pool_spin_count(nullptr, "PASSIVE"), 0);
  EXPECT_EQ(zaya::leaf_pool_spin_count(nullptr, "passive"), 0);
  EXPECT_EQ(zaya::leaf_pool_spin_count(nullptr, "ACTIVE"), -1);
  EXPECT_EQ(zaya::leaf_pool_spin_count("10000", "PASSIVE"), 10000);
  EXPECT_EQ(zaya::leaf_pool_spin_count("10000", "ACTIVE"), 10000);  // GOMP_SPINCOUNT wins, as in libgomp
  EXPECT_EQ(zaya::leaf_pool_spin_count("20k", nullptr), 20000);
  EXPECT_EQ(zaya::leaf_pool_spin_count("2M", nullptr), 2000000);
  EXPECT_EQ(zaya::leaf_pool_spin_count("infinite", nullptr), -1);
  EXPECT_EQ(zaya::leaf_pool_spin_count("INFINITY", "PASSIVE"), -1);
  EXPECT_EQ(zaya::leaf_pool_spin_count("40G", nullptr), -1);
  EXPECT_EQ(zaya::leaf_pool_spin_count("junk", "PASSIVE"), 0);  // not a count: the policy decides
  EXPECT_EQ(zaya::leaf_pool_spin_count("-5", nullptr), 300000);
}

}  // namespace
