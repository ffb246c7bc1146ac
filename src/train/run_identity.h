// The identity of a training run: which run a directory, a checkpoint or a summary belongs to.
//   config: the part of TRAIN.json (after the command line's --steps) that decides the trajectory: the model
//     and its seed, the data and its seed, the optimizer, the batch, the steps, the dtype and the bad-step
//     policy. Not: where files go ("out", "checkpoint"), how often to evaluate, log or sample, the time
//     limit, the saved dtype, recomputation (bitwise the same) or the comment: changing those continues the
//     same run.
//   config_hash: xxh3-64 of that JSON with sorted keys.
//   run_id: 16 hex digits drawn at a fresh start; a resumed run keeps the one its checkpoint carries.
// `zaya train` writes it as <out>/run.json and <checkpoint.dir>/run.json and into every checkpoint's state
// ("identity"), so that a fresh start refuses a directory of another run, --resume refuses a checkpoint of
// another config, and retention removes only the run's own checkpoints (train/run_start.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/train_config.h"

namespace zaya::train {

struct RunIdentity {
  std::string run_id;  // "" when unknown (a checkpoint saved before run identities)
  std::string config_hash;
  nlohmann::json config;

  nlohmann::json to_json() const;  // {"run_id", "config_hash", "config"}: the checkpoint state's "identity"
};

// The identity of `c` without a run id: its identity config and hash.
RunIdentity identity_of_config(const TrainConfig& c);

// A fresh run id: 16 hex digits from the system's random source.
uint64_t new_run_id_number();
std::string run_id_string(uint64_t id);
// The number of a run id made by run_id_string; false for any other string.
bool parse_run_id(const std::string& id, uint64_t* out);

// The identity a checkpoint's state records (state["identity"]); nullopt when it has none (saved before run
// identities) or it is malformed.
std::optional<RunIdentity> identity_of_state(const nlohmann::json& state);

// The run id recorded in the manifest of checkpoint directory `step_dir` (read without verifying the data),
// or "" when it cannot be read: no manifest, a malformed one, or no identity.
std::string checkpoint_run_id(const std::string& step_dir);

// The differences between two identity configs, as "steps: 520 (saved) vs 5 (this run); optim.lr: ...";
// at most `max_items` fields, then "and N more".
std::string describe_config_difference(const nlohmann::json& saved, const nlohmann::json& ours,
                                       size_t max_items = 6);

// <dir>/run.json: the identity, the seeds, the step count and where the run writes, plus the time of the
// run's first start (kept from an existing file of the same run).
void write_run_json(const std::string& dir, const RunIdentity& id, const TrainConfig& c);

// A run.json as read back: `present` when the file exists; `readable` when it parses and names a run id.
struct RunJson {
  bool present = false, readable = false;
  std::string path, run_id, config_hash;
  nlohmann::json body;
};
RunJson read_run_json(const std::string& dir);

}  // namespace zaya::train
