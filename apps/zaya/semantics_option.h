// The `--semantics auto|native|legacy` option shared by every command that loads a model (spec §8.4).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/zaya-config.h"

namespace zaya::app {

struct SemanticsOption {
  std::string name = "auto";
  bool legacy_flag = false;  // --legacy-semantics: the older spelling of --semantics legacy

  Semantics get() const { return legacy_flag ? Semantics::Legacy : parse_semantics(name, "--semantics"); }
};

inline void add_semantics_option(CLI::App& app, SemanticsOption& s) {
  app.add_option(
         "--semantics", s.name,
         "whose numbers to reproduce: auto = the checkpoint's own (legacy layouts: Zyphra's legacy code, "
         "skip passthrough + its router-norm eps; native: the HF code), native, legacy")
      ->check(CLI::IsMember({"auto", "native", "legacy"}))
      ->capture_default_str();
  app.add_flag("--legacy-semantics", s.legacy_flag, "same as --semantics legacy")
      ->excludes(app.get_option("--semantics"));
}

}  // namespace zaya::app
