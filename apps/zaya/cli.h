// Command-line parsing shared by the subcommands: CLI11 with the project's conventions.
//   - help names the command as users type it ("zaya train", "zaya bench forward") and shows every option's
//     default value;
//   - a parse error is "zaya train: error: ..." with, for a mistyped subcommand or option, the nearest known
//     one ("did you mean --steps?"), then where to find the options. Exit status 2 (a usage error).
// Use in a subcommand handler (argv[0] is the subcommand's name, as main() passes it):
//   CLI::App app{"what it does"};  ... add options ...
//   ZAYA_PARSE(app, argc, argv);
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace zaya::app {

// -1 when argv parsed (go on); otherwise the exit status to return (0 after --help).
int parse_args(CLI::App& app, int argc, char** argv);

}  // namespace zaya::app

#define ZAYA_PARSE(app, argc, argv)                                                             \
  do {                                                                                          \
    if (const int zaya_parse_rc = ::zaya::app::parse_args(app, argc, argv); zaya_parse_rc >= 0) \
      return zaya_parse_rc;                                                                     \
  } while (0)
