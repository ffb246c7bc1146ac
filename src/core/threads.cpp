#include "core/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

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
  return omp_in_parallel() != 0 || in_leaf_pool_job();
}

int threads_here() {
  return in_parallel_region() ? 1 : num_threads();
}

int procs_running_from_proc_stat(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    static const char kKey[] = "procs_running ";
    if (line.compare(0, sizeof(kKey) - 1, kKey) != 0) continue;
    char* end = nullptr;
    const long n = std::strtol(line.c_str() + sizeof(kKey) - 1, &end, 10);
    if (end == line.c_str() + sizeof(kKey) - 1 || n < 0 || n > (1 << 30)) return -1;  // not a count
    return int(n);
  }
  return -1;
}

bool short_spin_fits(int others, int threads, int cpus) {
  return others >= 0 && threads >= 1 && others + threads <= cpus;
}

// A positive count at the start of an environment variable ("4", "4,2": the outer level's), else 0; values
// beyond 1 << 20 (no machine has that many threads) clamp there rather than overflow.
static int env_count(const char* name) {
  const char* env = std::getenv(name);
  if (!env) return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || n < 1) return 0;
  return int(std::min<long>(n, 1 << 20));
}

bool machine_idle_for_short_spin() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  const int cpus = CPU_COUNT(&set);
  int threads = env_count("OMP_NUM_THREADS");
  if (threads == 0) threads = cpus;
  // Ranks of one MPI job on this node that are not bound to CPUs of their own share these CPUs: count theirs.
  if (cpus >= sysconf(_SC_NPROCESSORS_ONLN)) {
    for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
      const int ranks = env_count(var);
      if (ranks > 1) {
        threads *= ranks;
        break;
      }
    }
  }
  // Runnable tasks of other processes: the machine's count less this process's running threads (the reader,
  // and OpenBLAS's pool, whose threads busy-wait for a while after the library loads). A neighbour that
  // competes for the CPUs is runnable all the time; one that starts beside us and soon sleeps (the python or
  // tee at the other end of a pipe, a shell) is not: so spin if the CPUs are free at any of up to 50 samples
  // 10 ms apart (an idle machine answers at the first; a busy one costs 0.5 s once: a python interpreter at
  // the other end of a pipe takes 0.1-0.4 s to start).
  for (int i = 0; i < 50; i++) {
    if (i) usleep(10000);
    std::ifstream f("/proc/stat");
    std::stringstream text;
    text << f.rdbuf();
    const int n = procs_running_from_proc_stat(text.str());
    if (n < 0) return false;
    int ours = 0;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream st(task.path() / "stat");
      std::string line;
      std::getline(st, line);
      const size_t paren = line.rfind(')');  // "tid (comm) S ...": comm may hold spaces and parentheses
      if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'R') ours++;
    }
    if (short_spin_fits(n - std::max(ours, 1), threads, cpus)) return true;
  }
  return false;
}

std::string omp_wait_summary() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (!policy && !spin) return "libgomp default";
  std::string s = policy ? policy : "";
  if (spin) s += std::string(s.empty() ? "" : ", ") + "GOMP_SPINCOUNT=" + spin;
  return s;
}

void ensure_blas_single_threaded() {
  // OpenBLAS's pthread workers busy-wait after each call; with more than one of them they would steal the
  // cores our OpenMP threads need next. One thread plus our own OpenMP split measured as fast or faster.
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace zaya
