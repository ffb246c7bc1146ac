// zaya export: a training checkpoint (ckpt/checkpoint.h, one step directory written by any number of ranks)
// as a Hugging Face checkpoint directory (config.json + safetensors, sharded with an index above a size) that
// `zaya forward`, `zaya generate` and `zaya train` (model.init_from) load.
//
// The model config comes from the TRAIN.json saved in the checkpoint's state (its model.config or
// model.init_from path must still exist), or from --model-config when that file has moved. Every parameter
// and buffer is assembled from the ranks' slices in fp32 (the trainer's master weights), then written in the
// requested dtype: fp32 reproduces the trainer's own final `model/` directory bit for bit. The run's
// tokenizer (--tokenizer, else the saved TRAIN.json's "tokenizer") is copied beside it, so that
// `zaya generate --prompt` works on the export. A non-empty --out is refused unless --overwrite.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint.h"
#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "io/output_dir.h"
#include "model/zaya-checkpoint.h"
#include "model/zaya-init.h"
#include "model/zaya-weights.h"
#include "train/train_config.h"

namespace {

// The model config of checkpoint `ck`: from --model-config when given, else from its saved TRAIN.json. Either
// way with the semantics the run trained with (TRAIN.json's model.semantics, spec §8.4), which config.json
// records when legacy.
zaya::ZayaConfig config_of(const zaya::ckpt::Checkpoint& ck, const std::string& model_config) {
  const nlohmann::json& st = ck.state();
  if (!model_config.empty()) {
    zaya::ZayaConfig c = zaya::load_config(model_config);
    std::string semantics = "auto";
    if (st.is_object() && st.contains("train_config")) {
      const nlohmann::json& tc = st["train_config"];
      const nlohmann::json j =
          tc.is_string() ? nlohmann::json::parse(tc.get<std::string>(), nullptr, false) : tc;
      if (j.is_object() && j.contains("model") && j["model"].is_object() &&
          j["model"].contains("semantics") && j["model"]["semantics"].is_string())
        semantics = j["model"]["semantics"].get<std::string>();
    }
    zaya::apply_semantics(c, zaya::parse_semantics(semantics, ck.dir() + ": the run's model.semantics"),
                          model_config);
    return c;
  }
  ZAYA_CHECK(
      st.is_object() && st.contains("train_config"), ck.dir(),
      ": the checkpoint's state has no 'train_config' (not written by `zaya train`?); pass the model's "
      "config.json with --model-config");
  const nlohmann::json& tc = st["train_config"];
  const std::string text = tc.is_string() ? tc.get<std::string>() : tc.dump();
  try {
    return zaya::train::parse_train_config(text, ck.dir() + "/manifest.json: state.train_config").model;
  } catch (const zaya::Error& e) {
    throw zaya::Error(zaya::str_cat(e.what(), " (pass the model's config.json with --model-config)"));
  }
}

// The saved TRAIN.json of checkpoint `ck` as JSON (null when it has none).
nlohmann::json saved_train_config(const zaya::ckpt::Checkpoint& ck) {
  const nlohmann::json& st = ck.state();
  if (!st.is_object() || !st.contains("train_config")) return nullptr;
  const nlohmann::json& tc = st["train_config"];
  const nlohmann::json j = tc.is_string() ? nlohmann::json::parse(tc.get<std::string>(), nullptr, false) : tc;
  return j.is_object() ? j : nlohmann::json(nullptr);
}

// Copies the tokenizer into the export: --tokenizer, else the run's own (TRAIN.json "tokenizer", a path
// relative to where the run was started: a warning when it is not found from here).
void copy_tokenizer(const zaya::ckpt::Checkpoint& ck, const std::string& flag, const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::string path = flag;
  if (path.empty()) {
    const nlohmann::json tc = saved_train_config(ck);
    if (tc.is_object() && tc.contains("tokenizer") && tc["tokenizer"].is_string())
      path = tc["tokenizer"].get<std::string>();
    if (path.empty()) return;
    if (!fs::is_regular_file(path)) {
      std::fprintf(stderr,
                   "export: WARNING: the run's tokenizer %s (TRAIN.json \"tokenizer\") is not found from "
                   "here: the export has no tokenizer.json (pass --tokenizer)\n",
                   path.c_str());
      return;
    }
  }
  fs::copy_file(path, out_dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
  std::fprintf(stderr, "export: tokenizer %s copied\n", path.c_str());
}

int cmd_export(int argc, char** argv) {
  CLI::App app{
      "Export a training checkpoint (step directory) as a Hugging Face checkpoint directory, with the run's "
      "tokenizer (--tokenizer, else TRAIN.json's \"tokenizer\")"};
  std::string ckpt_dir, out_dir, dtype = "bf16", model_config, tokenizer;
  double max_shard_mb = 5000.0;
  bool overwrite = false;
  app.add_option("--checkpoint", ckpt_dir, "training checkpoint directory (…/checkpoints/step_NNNNNNNN)")
      ->required();
  app.add_option("--out", out_dir, "output HF directory (config.json + safetensors)")->required();
  app.add_option("--dtype", dtype, "stored dtype (default bf16)")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--max-shard-mb", max_shard_mb,
                 "shard the weights above this many MB per file (default 5000)")
      ->check(CLI::PositiveNumber);
  app.add_option("--model-config", model_config,
                 "model config.json (default: the one named by the TRAIN.json saved in the checkpoint)");
  app.add_flag("--overwrite", overwrite,
               "write into a non-empty --out: its checkpoint files (config.json, *.safetensors, the index, "
               "tokenizer files) are removed first");
  app.add_option("--tokenizer", tokenizer, "copy this tokenizer.json into the output directory");
  ZAYA_PARSE(app, argc, argv);
  zaya::ckpt::check_checkpoint_dir(ckpt_dir, "--checkpoint");

  zaya::check_output_dir(out_dir, "--out", overwrite);
  ZAYA_CHECK(tokenizer.empty() || std::filesystem::is_regular_file(tokenizer), "--tokenizer ", tokenizer,
             ": no such file");

  const zaya::ckpt::Checkpoint ck = zaya::ckpt::Checkpoint::open(ckpt_dir);  // verifies every checksum
  const zaya::ZayaConfig cfg = config_of(ck, model_config);
  // The saved run shape names the parameter count: a config that does not match is caught before assembly.
  const nlohmann::json& run = ck.state().value("run", nlohmann::json::object());
  if (run.is_object() && run.contains("num_params") && run["num_params"].is_number_integer())
    ZAYA_CHECK(run["num_params"].get<int64_t>() == cfg.num_params(), ck.dir(), ": saved model has ",
               run["num_params"].get<int64_t>(), " parameters, the config gives ", cfg.num_params(),
               " (wrong --model-config?)");

  // Correctly shaped fp32 slots (qkv fused as everywhere else), every one overwritten from the checkpoint.
  zaya::ZayaWeights w = zaya::init_weights(cfg, zaya::DType::F32, 0);
  int64_t count = 0;
  for (auto& np : zaya::named_params(cfg, w)) {
    ck.assemble(np.name, zaya::DType::F32, np.shape, np.slot->data);
    count++;
  }
  const zaya::DType dt = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  const std::vector<std::string> removed = zaya::remove_model_files(out_dir);
  if (!removed.empty()) {
    std::string names;
    for (const auto& n : removed) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "export: --overwrite: removed %s from %s\n", names.c_str(), out_dir.c_str());
  }
  zaya::save_hf_checkpoint(out_dir, cfg, w, dt, uint64_t(max_shard_mb * 1e6));
  copy_tokenizer(ck, tokenizer, out_dir);
  std::fprintf(stderr, "export: step %ld (%d rank%s): %ld tensors, %.3f M parameters in %s -> %s\n",
               long(ck.step()), ck.world(), ck.world() == 1 ? "" : "s", long(count), cfg.num_params() / 1e6,
               dtype.c_str(), out_dir.c_str());
  return 0;
}

zaya::app::Register reg("export", "export a training checkpoint as a Hugging Face checkpoint directory",
                        cmd_export);

}  // namespace
