#include "dist/comm.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace zaya::dist {

namespace {

// The outstanding nonblocking requests of the (single) world communicator, in posting order.
std::vector<MPI_Request> g_requests;
bool g_mpi_initialised = false;

// Tags of the heartbeat's point-to-point messages (a context apart from the collectives').
constexpr int kTagArrive = 7101, kTagGo = 7102;

// Largest element count of one MPI call (counts are int); longer buffers go in pieces.
constexpr int64_t kMaxCount = int64_t(1) << 30;

// True when a launcher (mpirun / mpiexec / srun) started this process as one rank of a job.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Polls `requests` until all completed or `timeout_s` passed; returns whether they completed.
// MPI advances nonblocking collectives only inside MPI calls (libnbc runs a large reduction as many rounds),
// so data waits (`patient` false) poll back to back, yielding the core between polls. Waits for other ranks'
// compute (heartbeats, `patient`) sleep between polls (growing to 1 ms) so that a waiting rank does not take
// a core from OpenMP threads.
bool poll_until(MPI_Request* requests, int n, double timeout_s, bool patient = false) {
  const double t0 = now_s();
  int spins = 0;
  for (;;) {
    int done = 0;
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return true;
    if ((++spins & 255) == 0 && now_s() - t0 > timeout_s) return false;
    if (patient && spins > 100)
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, spins)));
    else
      std::this_thread::yield();
  }
}

}  // namespace

Comm::Comm() {
  if (!launched_by_mpi()) return;  // a world of one, without MPI
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  g_mpi_initialised = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (const char* t = std::getenv("ZAYA_COMM_TIMEOUT")) timeout_s_ = std::atof(t);
}

Comm& Comm::world() {
  static Comm comm;
  return comm;
}

void Comm::finalize() {
  if (!g_mpi_initialised) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void Comm::abort(const std::string& message, int code) {
  const Comm& c = world();
  std::fprintf(stderr, "zaya: rank %d of %d: %s\n", c.rank_, c.size_, message.c_str());
  std::fflush(stderr);
  if (g_mpi_initialised && c.size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void Comm::heartbeat(const std::string& point) {
  const int64_t beat = heartbeats_++;
  if (!active()) return;
  int64_t mine = beat;
  if (rank_ == 0) {
    std::vector<int64_t> arrived(size_t(size_), -1);
    std::vector<MPI_Request> reqs(size_t(size_ - 1));
    for (int r = 1; r < size_; r++)
      MPI_Irecv(&arrived[size_t(r)], 1, MPI_INT64_T, r, kTagArrive, MPI_COMM_WORLD, &reqs[size_t(r - 1)]);
    if (!poll_until(reqs.data(), size_ - 1, timeout_s_, /*patient=*/true)) {
      std::string missing;
      for (int r = 1; r < size_; r++) {
        int done = 0;
        MPI_Test(&reqs[size_t(r - 1)], &done, MPI_STATUS_IGNORE);
        if (!done) missing += str_cat(missing.empty() ? "" : ", ", r);
      }
      abort(str_cat("rank(s) ", missing, " did not reach ", point, " within ", timeout_s_,
                    " s (died or hung); aborting the job"),
            3);
    }
    for (int r = 1; r < size_; r++)
      if (arrived[size_t(r)] != beat)
        abort(str_cat("rank ", r, " is at heartbeat ", arrived[size_t(r)], ", rank 0 at ", beat, " (", point,
                      "): the ranks ran different step sequences"),
              3);
    for (int r = 1; r < size_; r++)
      MPI_Isend(&mine, 1, MPI_INT64_T, r, kTagGo, MPI_COMM_WORLD, &reqs[size_t(r - 1)]);
    if (!poll_until(reqs.data(), size_ - 1, timeout_s_))
      abort(str_cat("the other ranks did not take rank 0's go at ", point, " within ", timeout_s_, " s"), 3);
  } else {
    int64_t go = -1;
    MPI_Request reqs[2];
    MPI_Isend(&mine, 1, MPI_INT64_T, 0, kTagArrive, MPI_COMM_WORLD, &reqs[0]);
    MPI_Irecv(&go, 1, MPI_INT64_T, 0, kTagGo, MPI_COMM_WORLD, &reqs[1]);
    // Rank 0 names a missing rank after timeout_s; a little longer here so that its message comes first
    // when rank 0 itself is alive.
    if (!poll_until(reqs, 2, timeout_s_ * 1.25 + 1, /*patient=*/true))
      abort(str_cat("rank 0 did not reach ", point, " within ", timeout_s_,
                    " s (died or hung); aborting the job"),
            3);
  }
}

void Comm::allreduce_sum(int64_t* data, int64_t n, const char* what) {
  if (!active()) return;
  ZAYA_ASSERT(n <= kMaxCount, "small reductions only");
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, data, int(n), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &req);
  if (!poll_until(&req, 1, timeout_s_))
    abort(str_cat(what, ": the other ranks did not join within ", timeout_s_, " s (a rank died or hangs)"),
          3);
}

std::vector<int64_t> Comm::allgather(int64_t local, const char* what) {
  std::vector<int64_t> all(size_t(size_), local);
  if (!active()) return all;
  MPI_Request req;
  MPI_Iallgather(&local, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD, &req);
  if (!poll_until(&req, 1, timeout_s_))
    abort(str_cat(what, ": the other ranks did not join within ", timeout_s_, " s (a rank died or hangs)"),
          3);
  return all;
}

double Comm::sum_in_rank_order(double local, const char* what) {
  if (!active()) return local;
  std::vector<double> all(static_cast<size_t>(size_));
  MPI_Request req;
  MPI_Iallgather(&local, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD, &req);
  if (!poll_until(&req, 1, timeout_s_))
    abort(str_cat(what, ": the other ranks did not join within ", timeout_s_, " s (a rank died or hangs)"),
          3);
  double sum = 0;
  for (double v : all) sum += v;  // rank order, the same additions on every rank
  return sum;
}

void Comm::ireduce_sum(float* data, int64_t n, int root) {
  if (!active()) return;
  for (int64_t off = 0; off < n; off += kMaxCount) {
    const int count = int(std::min(kMaxCount, n - off));
    MPI_Request req;
    // In place at the root; the other ranks' buffers are only read.
    MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : data + off, data + off, count, MPI_FLOAT, MPI_SUM, root,
                MPI_COMM_WORLD, &req);
    g_requests.push_back(req);
  }
}

void Comm::reduce_sum(float* data, int64_t n, int root) {
  if (!active()) return;
  for (int64_t off = 0; off < n; off += kMaxCount) {
    const int count = int(std::min(kMaxCount, n - off));
    MPI_Reduce(rank_ == root ? MPI_IN_PLACE : data + off, data + off, count, MPI_FLOAT, MPI_SUM, root,
               MPI_COMM_WORLD);
  }
}

void Comm::broadcast(float* data, int64_t n, int root) {
  if (!active()) return;
  for (int64_t off = 0; off < n; off += kMaxCount)
    MPI_Bcast(data + off, int(std::min(kMaxCount, n - off)), MPI_FLOAT, root, MPI_COMM_WORLD);
}

void Comm::ibroadcast(float* data, int64_t n, int root) {
  if (!active()) return;
  for (int64_t off = 0; off < n; off += kMaxCount) {
    const int count = int(std::min(kMaxCount, n - off));
    MPI_Request req;
    MPI_Ibcast(data + off, count, MPI_FLOAT, root, MPI_COMM_WORLD, &req);
    g_requests.push_back(req);
  }
}

bool Comm::test_all() {
  if (g_requests.empty()) return true;
  int done = 0;
  MPI_Testall(int(g_requests.size()), g_requests.data(), &done, MPI_STATUSES_IGNORE);
  if (done) g_requests.clear();
  return done != 0;
}

void Comm::wait_all(const char* what) {
  if (g_requests.empty()) return;
  if (!poll_until(g_requests.data(), int(g_requests.size()), timeout_s_))
    abort(str_cat(what, ": the other ranks did not complete it within ", timeout_s_,
                  " s (a rank died or hangs)"),
          3);
  g_requests.clear();
}

size_t Comm::pending() const {
  return g_requests.size();
}

}  // namespace zaya::dist
