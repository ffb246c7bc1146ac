// Subcommand registry of the `zaya` binary. Each apps/zaya/cmd_*.cpp registers one subcommand:
//   static zaya::app::Register reg("tokenize", "encode/decode text with a tokenizer.json", cmd_tokenize);
// main() dispatches on argv[1]; the handler receives argv from the subcommand name on.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace zaya::app {

using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name, help;
  CommandFn fn;
};

std::vector<Command>& registry();

struct Register {
  Register(const std::string& name, const std::string& help, CommandFn fn) {
    registry().push_back({name, help, std::move(fn)});
  }
};

}  // namespace zaya::app
