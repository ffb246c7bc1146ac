// zaya init: writes a fresh HF-format checkpoint (config.json + safetensors, sharded above a size) with the
// reference initialisation. Streams tensor by tensor into mapped shards, so the real ZAYA1-8B shape
// (17.7 GB in bf16) is written without holding it in memory. A non-empty --out is refused unless
// --overwrite, which first removes the checkpoint files there (so no stale tokenizer.json stays).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "io/output_dir.h"
#include "io/safetensors_writer.h"
#include "model/zaya-init.h"
#include "model/zaya-weights.h"

namespace {

int cmd_init(int argc, char** argv) {
  CLI::App app{"Write a freshly initialised ZAYA1 checkpoint in Hugging Face layout"};
  std::string config_path, out_dir, dtype = "bf16", tokenizer;
  uint64_t seed = 0;
  double max_shard_gb = 5.0;
  bool overwrite = false;
  app.add_option("--config", config_path, "model config.json (native or legacy)")->required();
  app.add_option("--out", out_dir, "output directory")->required();
  app.add_option("--dtype", dtype, "stored dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--seed", seed, "initialisation seed");
  app.add_option("--max-shard-gb", max_shard_gb, "shard the weights above this many GB per file (default 5)");
  app.add_flag("--overwrite", overwrite,
               "write into a non-empty --out: its checkpoint files (config.json, *.safetensors, the index, "
               "tokenizer files) are removed first");
  app.add_option("--tokenizer", tokenizer, "copy this tokenizer.json into the checkpoint");
  ZAYA_PARSE(app, argc, argv);

  zaya::check_output_dir(out_dir, "--out", overwrite);
  ZAYA_CHECK(tokenizer.empty() || std::filesystem::is_regular_file(tokenizer), "--tokenizer ", tokenizer,
             ": no such file");

  zaya::ZayaConfig cfg = zaya::load_config(config_path);
  cfg.layout = zaya::CheckpointLayout::Native;  // always written in the native layout
  const zaya::DType dt = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  zaya::ZayaWeights slots;
  std::vector<zaya::TensorSpec> specs;
  for (const auto& p : zaya::named_params(cfg, slots)) {
    // Every tensor in the stored dtype, balancing_biases included, as save_pretrained does (the golden
    // model.bf16.safetensors); the loader keeps vectors and balancing biases in fp32 whatever is stored.
    specs.push_back({p.name, dt, p.shape});
  }
  const std::vector<std::string> removed = zaya::remove_model_files(out_dir);
  if (!removed.empty()) {
    std::string names;
    for (const auto& n : removed) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "init: --overwrite: removed %s from %s\n", names.c_str(), out_dir.c_str());
  }
  std::filesystem::create_directories(out_dir);
  auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0, done = 0;
  double last_print = -1;
  for (const auto& s : specs) total += s.nbytes();
  std::fprintf(stderr, "init: %ld tensors, %.3f B parameters, %.2f GB in %s -> %s\n", long(specs.size()),
               cfg.num_params() / 1e9, total / 1e9, dtype.c_str(), out_dir.c_str());
  auto fill = [&](const zaya::TensorSpec& s, void* dst) {
    zaya::init_tensor(dst, s.name, s.shape, s.dtype, cfg, seed);
    done += s.nbytes();
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (total > (1ull << 30) && el - last_print >= 1.0) {  // at most one progress line per second
      last_print = el;
      std::fprintf(stderr, "\rinit: %5.1f%%  %.2f / %.2f GB  %.0f MB/s ", 100.0 * done / total, done / 1e9,
                   total / 1e9, done / 1e6 / std::max(el, 1e-9));
    }
  };
  auto files =
      zaya::write_safetensors_sharded(out_dir, specs, fill, uint64_t(max_shard_gb * 1e9), {{"format", "pt"}});
  {
    std::ofstream f(out_dir + "/config.json");
    f << zaya::config_to_json(cfg);
    ZAYA_CHECK(f.good(), out_dir, "/config.json: write failed");
  }
  if (!tokenizer.empty())
    std::filesystem::copy_file(tokenizer, out_dir + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\ninit: wrote %ld file(s), %.2f GB in %.1f s\n", long(files.size()), total / 1e9, el);
  return 0;
}

zaya::app::Register reg("init", "write a freshly initialised checkpoint (HF layout, sharded)", cmd_init);

}  // namespace
