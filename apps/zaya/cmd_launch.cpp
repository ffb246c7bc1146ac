// zaya launch: the fault-tolerance supervisor (src/launch/supervisor.h, docs/fault-tolerance.md).
//   zaya launch --max-restarts 5 -- mpirun -np 2 zaya train --config T.json --resume auto
// Everything after `--` is the command, passed on untouched (its own options are never parsed here).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "launch/supervisor.h"

namespace {

int cmd_launch(int argc, char** argv) {
  CLI::App app{
      "Run a training command and restart it after a crash or a hang (no heartbeat) until it succeeds or "
      "--max-restarts restarts have failed; the command resumes by itself (zaya train ... --resume auto). "
      "Usage: zaya launch [options] -- <command...> (docs/fault-tolerance.md)"};
  zaya::launch::LaunchOptions o;
  app.add_option("--max-restarts", o.max_restarts, "restarts after failures before giving up (default 3)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout_s,
                 "seconds without a heartbeat (ZAYA_HEARTBEAT_FILE rewritten) that count as a hang; 0 = off "
                 "(default 600)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--startup-timeout", o.startup_timeout_s,
                 "seconds an attempt may take to its first heartbeat; 0 = unlimited (default 1800)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--backoff", o.backoff_s,
                 "seconds to wait before the first restart, doubled after each consecutive failure; reset "
                 "when an attempt got further than every earlier one (default 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-backoff", o.max_backoff_s, "cap of the backoff in seconds (default 60)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-grace", o.kill_grace_s,
                 "seconds between SIGTERM and SIGKILL when ending a job (default 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--heartbeat-file", o.heartbeat_file,
                 "the liveness file passed to the job as ZAYA_HEARTBEAT_FILE (default: in a fresh temp dir)");
  app.add_option("--report", o.report_file, "also write the report (every attempt) as JSON to FILE");

  // Split at the first `--`: the options before it are ours, the words after it the command.
  int split = argc;
  for (int i = 1; i < argc; i++)
    if (!std::strcmp(argv[i], "--")) {
      split = i;
      break;
    }
  ZAYA_PARSE(app, split, argv);
  for (int i = split + 1; i < argc; i++) o.command.push_back(argv[i]);
  ZAYA_CHECK(!o.command.empty(),
             "no command to run: expected `-- <command...>` after the options, e.g. zaya launch "
             "--max-restarts 3 -- zaya train --config TRAIN.json --resume auto");

  const zaya::launch::LaunchReport r = zaya::launch::supervise(o);
  // The full report when anything went wrong (each attempt's line was logged as it ended already).
  if (r.attempts.size() > 1 || r.exit_code != 0) std::fputs(r.to_text().c_str(), stderr);
  return r.exit_code;
}

zaya::app::Register reg("launch", "run a training command, restart it after crashes and hangs (supervisor)",
                        cmd_launch);

}  // namespace
