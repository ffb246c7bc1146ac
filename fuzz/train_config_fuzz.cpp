// Fuzzes TRAIN.json (train/train_config.h): any input must either parse or raise zaya::Error; nothing else
// may escape and nothing may crash. The corpus holds the real configs/train-*.json, whose model.config
// ("configs/small.json") is relative to the working directory, as for `zaya train`: the target runs in the
// source tree, so a valid TRAIN.json parses through the model config too.
#include <unistd.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool in_source_dir = ::chdir(ZAYA_SOURCE_DIR) == 0;
  (void)in_source_dir;
  try {
    zaya::train::TrainConfig c =
        zaya::train::parse_train_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    ZAYA_ASSERT(c.micro_batch >= 1 && c.seq_len >= 1 && c.grad_accum >= 1 && c.steps >= 1,
                "a parsed TRAIN.json has a positive batch and run length");
  } catch (const zaya::Error&) {
  }
  return 0;
}
