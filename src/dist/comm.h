// The process group of data-parallel training: MPI's world communicator behind a small interface, with a
// deadline on every wait so that a rank that died or hangs brings the job down with a message naming it
// instead of a silent hang.
//
// Launch: `mpirun -np N zaya train ...` or `srun zaya train ...` (docs/distributed.md). Started without a
// launcher (no OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK in the environment) there is no MPI at all: a
// world of one, every collective a no-op, so single-process runs behave exactly as before.
//
// Determinism: the collectives here are either exact (int64 sums) or reduce in a fixed order for a fixed
// world size: scalar sums are all-gathered and added in rank order on every rank (bitwise the same result
// everywhere, whatever algorithm MPI picks); fp32 buffers go through MPI_Ireduce / MPI_Ibcast, whose result
// for a fixed world size, message size and root is fixed by OpenMPI's algorithm choice (libnbc's binomial
// tree), and for 2 ranks is a + b whichever tree is used.
//
// Threads: MPI is called from the main thread only (MPI_THREAD_FUNNELED), outside OpenMP regions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zaya::dist {

class Comm {
 public:
  // The process's world, initialising MPI on first use when a launcher started it. timeout() (300 s unless
  // set_timeout changes it) bounds every wait for the other ranks.
  static Comm& world();
  // Finalises MPI when it was initialised (call once at the end of a successful run).
  static void finalize();
  // Ends every rank of the job now (MPI_Abort) with `code`, after printing `message` naming this rank.
  [[noreturn]] static void abort(const std::string& message, int code = 1);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool active() const { return size_ > 1; }
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

  // Liveness check at a point every rank reaches (e.g. the start of step `step`): rank 0 waits for every
  // rank's arrival and names the ranks that do not arrive within the timeout; the others wait for rank 0's
  // go and name rank 0 when it does not come. Either way the job is aborted.
  void heartbeat(const std::string& point);

  // In-place sums over all ranks.
  void allreduce_sum(int64_t* data, int64_t n, const char* what);
  // Σ over ranks of one double per rank, added in rank order (bitwise identical on every rank).
  double sum_in_rank_order(double local, const char* what);
  // Every rank's value, in rank order.
  std::vector<int64_t> allgather(int64_t local, const char* what);

  // Nonblocking fp32 collectives: each returns a request index to pass to wait_all / test_all.
  // reduce: the element-wise sum of every rank's data[0, n) lands in root's data (in place); other ranks'
  // buffers are left as they were. broadcast: root's data[0, n) is copied to every rank.
  void ireduce_sum(float* data, int64_t n, int root);
  void ibroadcast(float* data, int64_t n, int root);
  // Blocking forms of the same (MPI's tuned, pipelined algorithms: ~3x faster than the nonblocking ones on
  // one machine, bench/dist_speed.sh). Call them only right after a heartbeat (every rank known to be
  // alive and here): they have no deadline of their own; a rank that dies inside them ends the job through
  // the launcher.
  void reduce_sum(float* data, int64_t n, int root);
  void broadcast(float* data, int64_t n, int root);
  // Drives outstanding requests forward without blocking (MPI progresses nonblocking collectives only inside
  // MPI calls); true when none is left.
  bool test_all();
  // Blocks until every outstanding request is done, or aborts the job after the timeout naming `what`.
  void wait_all(const char* what);
  size_t pending() const;

 private:
  Comm();
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 300;
  int64_t heartbeats_ = 0;  // heartbeat() calls so far: every rank must be at the same one
};

}  // namespace zaya::dist
