// The flags shared by every command that loads a model: `--semantics auto|native|legacy` (spec §8.4),
// `--no-mmap` (model/zaya-weights.h: load_weights' in_memory) and `--kv-cache f32|bf16` (model/zaya-cache.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/zaya-config.h"
#include "model/zaya.h"

namespace zaya::app {

struct LoadFlags {
  std::string name = "auto";
  bool legacy_flag = false;  // --legacy-semantics: the older spelling of --semantics legacy

  bool no_mmap = false;
  std::string kv_cache = "f32";

  Semantics get() const { return legacy_flag ? Semantics::Legacy : parse_semantics(name, "--semantics"); }
  void apply(LoadOptions& lo) const {
    lo.semantics = get();
    lo.in_memory = no_mmap;
    lo.kv_cache = kv_cache == "bf16" ? DType::BF16 : DType::F32;
  }
};

// with_no_mmap: false where the model is loaded for training (its parameters are copies anyway).
inline void add_load_flags(CLI::App& app, LoadFlags& s, bool with_no_mmap = true) {
  app.add_option(
         "--semantics", s.name,
         "whose numbers to reproduce: auto = the checkpoint's own (legacy layouts: Zyphra's legacy code, "
         "skip passthrough + its router-norm eps; native: the HF code), native, legacy")
      ->check(CLI::IsMember({"auto", "native", "legacy"}))
      ->capture_default_str();
  app.add_flag("--legacy-semantics", s.legacy_flag, "same as --semantics legacy")
      ->excludes(app.get_option("--semantics"));
  if (!with_no_mmap) return;
  app.add_flag("--no-mmap", s.no_mmap,
               "copy the weights out of the memory-mapped checkpoint into huge pages: a longer load and more "
               "resident memory at once, a faster decode (no 4 KiB-page TLB misses while streaming weights)");
  app.add_option("--kv-cache", s.kv_cache,
                 "how the attention cache stores keys and values: f32, or bf16 (each rounded once to nearest "
                 "even: half the memory, and half the bytes a decode step's attention reads)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
}

}  // namespace zaya::app
