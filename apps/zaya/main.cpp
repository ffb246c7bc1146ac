// zaya: the single binary. `zaya <command> [options]`; `zaya <command> --help` for each command.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "command.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/suggest.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "zaya_version.h"

namespace zaya::app {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace zaya::app

static void usage() {
  auto cmds = zaya::app::registry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::fprintf(stderr, "zaya.cpp: train, evaluate and serve ZAYA1 mixture-of-experts models\n\n");
  std::fprintf(stderr,
               "usage: zaya <command> [options]   (zaya <command> --help for its options; zaya --version)\n\n"
               "commands:\n");
  for (const auto& c : cmds) std::fprintf(stderr, "  %-12s %s\n", c.name.c_str(), c.help.c_str());
}

int main(int argc, char** argv) {
  // OpenMP's waiting policy (core/threads.h): PASSIVE, with a short spin when the machine has a free CPU for
  // each of our threads. The runtime reads it before main(), so when the user has chosen neither
  // OMP_WAIT_POLICY nor GOMP_SPINCOUNT, set them and re-execute once.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    if (zaya::machine_idle_for_short_spin())
      setenv("GOMP_SPINCOUNT", std::to_string(zaya::kShortSpinCount).c_str(), 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run with the default policy
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::printf("zaya.cpp %s (commit %s, %s build)\ncpu: %s\nomp wait: %s\nbf16 gemm: %s\n", ZAYA_VERSION,
                ZAYA_GIT_COMMIT, ZAYA_BUILD_TYPE, zaya::cpu_summary().c_str(),
                zaya::omp_wait_summary().c_str(), zaya::gemm_bf16_summary());
    return 0;
  }
  for (const auto& c : zaya::app::registry()) {
    if (c.name == argv[1]) {
      try {
        return c.fn(argc - 1, argv + 1);
      } catch (const zaya::Error& e) {
        std::fprintf(stderr, "zaya %s: error: %s\n", argv[1], e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "zaya %s: error: %s\n", argv[1], e.what());
        return 1;
      }
    }
  }
  std::vector<std::string> names;
  for (const auto& c : zaya::app::registry()) names.push_back(c.name);
  std::fprintf(stderr, "zaya: unknown command '%s'%s\n\n", argv[1],
               zaya::did_you_mean(argv[1], names).c_str());
  usage();
  return 2;
}
